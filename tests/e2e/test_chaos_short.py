"""Quota under chaos, short mode (issue 27): benchmarks/bench_chaos.py --short as a test, with
the benchmark's own targets as its assertions. A schedule of bad luck (refusals, a CHART-IMG-
wide throttle, 500 and 504 bursts, a key spent by another client, a template drawing 401, a
template edited, Firestore paused, an instance killed and restarted) over steady traffic on 3
served instances, the Firestore emulator with its real triggers and fake-gcs-server.

Judged by what the run counted (usage documents, the stand-in's log, the steps, the manifests
and their PNGs, Eventarc's record), never by how long anything took: the schedule's windows
are seconds apart, so a busy machine moves them, never the verdict. The seed is fixed, so a
failure names a schedule that can be replayed: `bench_chaos.py --short --seed N --print-schedule`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.builders import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from bench_chaos import run_chaos
from chaos.schedule import SHORT
from chaos.targets import checks, report

pytestmark = pytest.mark.emulators


@pytest.mark.parametrize("seed", [1])
def test_a_short_schedule_of_bad_luck_meets_every_target(seed: int, tmp_path: Path) -> None:
    figures = run_chaos(seed, SHORT, tmp_path / f"seed{seed}")
    missed = [f"{c.target}: {c.figure}" for c in checks(figures) if not c.ok]
    assert not missed, "\n".join(["targets missed:", *missed, "figures:", *report(figures)])
