"""The checks of the service's listed equivalents (scripts/mutation_equivalents.txt, block
`# --- service survivors (execute) ---`): each applies the entry's mutant and runs whole
steps on the local adapters with it and without it, comparing what they come to. Registered
in test_equivalents.py's list of checks by importing this module there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.builders import chart_step, flow_run
from unit.mutation.mutants import Equivalent, assert_same, checks, late, outcome
from unit.service.test_execute import LIMITS, CrashingChartApi, make_world
from worker_chart_export.adapters.local import LocalFlowRunStore
from worker_chart_export.core.types import FinalizeResult
from worker_chart_export.service import execute
from worker_chart_export.testing import FakeClock


@dataclass
class FinalizedFirstStore:
    """The local store, where another execution's finalize always came first."""

    inner: LocalFlowRunStore

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> FinalizeResult:
        return FinalizeResult(False, "step charts is SUCCEEDED: another execution finalized it")


def _step_ending(document: dict[str, Any], **ports: Callable[[Any], Any]) -> Callable[[], Any]:
    """A fresh world per call, where the step is executed twice (the second finds it taken):
    what each execution gave (its report, or what it raised), and the step and the manifest
    as stored."""

    def run() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            base = make_world(Path(tmp), document)
            world = make_world(Path(tmp), document, **{name: make(base) for name, make in ports.items()})
            step = late(
                execute, "execute_step", "run1", "charts", ports=world.ports, limits=LIMITS, clock=FakeClock()
            )
            outcomes = [outcome(step) for _ in range(2)]
            stored = base.store.read()["steps"]["charts"] if base.store.state.exists() else {}
            manifest = Path(tmp, "gcs", "bkt", "charts", "run1", "charts", "manifest.json")
            written = manifest.read_text() if manifest.exists() else None
            # the claim's token is new on every run (the manifest carries none)
            return outcomes, {k: v for k, v in stored.items() if k != "claimToken"}, written

    return run


@checks
def test_a_claimed_step_ends_the_same_whatever_its_report_holds(entry: Equivalent) -> None:
    """Every way a claimed step ends: SUCCEEDED, FAILED for its charts, for its inputs, its
    finalize beaten by another execution's, and a crash (recorded, then raised)."""
    ready = chart_step()
    cases: list[tuple[dict[str, Any], dict[str, Callable[[Any], Any]]]] = [
        (flow_run({"charts": ready}), {}),
        (flow_run({"charts": ready}, symbol="BROKENUSDT"), {}),
        (flow_run({"charts": chart_step(timeframe="7h")}), {}),
        (flow_run({"charts": ready}), {"flow_runs": lambda base: FinalizedFirstStore(base.store)}),
        (flow_run({"charts": ready}), {"chart_api": lambda base: CrashingChartApi()}),
    ]
    for document, ports in cases:
        assert_same(entry, _step_ending(document, **ports))
