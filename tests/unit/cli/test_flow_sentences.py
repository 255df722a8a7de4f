"""What `advance` and `reap` print by default: one sentence a person reads, for every outcome
(the emulator test, tests/integration/test_flow_commands.py, runs the commands themselves)."""

from __future__ import annotations

from worker_chart_export.cli.flow import advance_sentence, reap_sentence
from worker_chart_export.core.flow.flow_graph import RunStatus
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate, ReapReport
from worker_chart_export.service.advance import AdvanceEffect


def lease(step_id: str) -> ExpiredLease:
    return ExpiredLease(f"run1__{step_id}", "run1", step_id, "token", "2026-11-22T04:00:00.000Z")


def test_advance_written_unchanged_and_stale() -> None:
    plan = AdvancePlan("2 step(s) READY: a, b; run RUNNING", ("a", "b"), RunStatus.RUNNING)
    assert advance_sentence("flow_runs/r", plan, AdvanceEffect.WRITTEN) == (
        "flow_runs/r: a, b made READY and run status set to RUNNING."
    )
    nothing = AdvancePlan("run is SUCCEEDED, which is final")
    assert advance_sentence("flow_runs/r", nothing, AdvanceEffect.UNCHANGED) == (
        "flow_runs/r: nothing to change (run is SUCCEEDED, which is final)."
    )
    assert advance_sentence("flow_runs/r", plan, AdvanceEffect.STALE).startswith(
        "flow_runs/r changed while it was being advanced: nothing written"
    )


def test_advance_that_fails_a_run_says_why() -> None:
    error = {"code": "FLOW_RUN_INVALID", "message": "step x depends on y, which does not exist"}
    plan = AdvancePlan(error["message"], run_status=RunStatus.FAILED, run_error=error)
    assert advance_sentence("run r (state out/flow_runs/r.json)", plan, AdvanceEffect.WRITTEN) == (
        "run r (state out/flow_runs/r.json): run status set to FAILED "
        "(FLOW_RUN_INVALID: step x depends on y, which does not exist)."
    )


def test_reap_names_every_outcome_in_one_sentence() -> None:
    report = ReapReport()
    report.add(LeaseFate.RETRIED, lease("a"))
    report.add(LeaseFate.RETRIED, lease("b"))
    report.add(LeaseFate.FAILED, lease("c"))
    report.add(LeaseFate.SUPERSEDED, lease("d"))
    report.add(LeaseFate.CLEARED, lease("e"))
    report.add(LeaseFate.NOT_EXPIRED, lease("f"))
    report.errors.append("run1/g: Firestore unavailable")
    sentence = reap_sentence(report, max_attempts=3)
    assert sentence == (
        "reaper pass: 7 expired lease(s): 2 step(s) READY again (run1/a, run1/b); "
        "1 FAILED with STEP_LEASE_EXPIRED after 3 attempt(s) (run1/c); 1 renewed meanwhile (left alone); "
        "1 claimed again meanwhile (left alone); 1 stray (the step had finished: lease deleted); "
        "1 could not be reaped (run1/g: Firestore unavailable): the next pass tries again."
    )
    assert "\n" not in sentence
    assert reap_sentence(ReapReport(), max_attempts=3) == "reaper pass: no expired lease, nothing to do."
