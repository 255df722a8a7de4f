"""Quota under chaos, short mode (issues 27 and 37): benchmarks/bench_chaos.py --short as a test,
with the benchmark's own targets as its assertions. A schedule of bad luck (refusals, a
CHART-IMG-wide throttle, 500 and 504 bursts, a key spent by another client, a template drawing
401, a template edited, Firestore paused, an instance killed and restarted) over steady
traffic on 3 served instances, the Firestore emulator with its real triggers and
fake-gcs-server. What a user feels: no deliverable step lost, the units counted what the
stand-in charged on every key, no wrong chart (by the request the stand-in received), no step
left unfinished.

Judged by what the run counted (usage documents, the stand-in's log and books, the steps, the
manifests and their PNGs, Eventarc's record), never by how long anything took: the schedule's
windows are seconds apart, so a busy machine moves them, never the verdict. Three seeds: two
fixed, and one drawn from today's date (UTC), so each day meets a schedule the others did not;
every seed is in the test's id and its failure message, and replays with
`.venv/bin/python benchmarks/bench_chaos.py --short --seed N` (`--print-schedule` to read it).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.builders import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from bench_chaos import run_chaos
from chaos.schedule import SHORT
from chaos.targets import checks, report

pytestmark = pytest.mark.emulators

DATE_SEED = int(datetime.now(UTC).strftime("%Y%m%d"))  # 20261128 on 28 November 2026
SEEDS = [
    pytest.param(1, id="seed1"),
    pytest.param(3, id="seed3"),
    pytest.param(DATE_SEED, id=f"seed{DATE_SEED}-today"),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_short_schedule_of_bad_luck_meets_every_target(seed: int, tmp_path: Path) -> None:
    replay = f"replay: .venv/bin/python benchmarks/bench_chaos.py --short --seed {seed}"
    print(replay)  # shown with the test's output (-s, or -rA)
    figures = run_chaos(seed, SHORT, tmp_path / f"seed{seed}")
    missed = [f"{c.target}: {c.figure}" for c in checks(figures) if not c.ok]
    assert not missed, "\n".join([replay, "targets missed:", *missed, "figures:", *report(figures)])
