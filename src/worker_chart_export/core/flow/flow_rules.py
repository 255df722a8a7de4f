"""advance_flow's rules as pure functions: which steps become READY and what the run status is.

docs/flow_rules.md states the rules in words; tests/unit/core/flow/test_flow_rules_properties.py checks this
module against a reference written from that text. A plan depends on the document alone, so a
duplicate or reordered event yields the same plan for the same snapshot, and the store applies it
under a precondition on that snapshot (a stale plan is rejected there, never merged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.flow.flow_graph import CANCEL_FLAG, RunStatus, find_problems, is_one_of
from worker_chart_export.core.types import StepStatus

if TYPE_CHECKING:
    from worker_chart_export.core.documents import ErrorDocument, FlowRunDocument, StepDocument

DONE_STEP_STATUSES = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})
ACTIVE_STEP_STATUSES = frozenset({StepStatus.READY, StepStatus.RUNNING})
TERMINAL_RUN_STATUSES: frozenset[str] = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
)

# The only direction a run status moves: PENDING -> RUNNING -> one terminal status, which is final.
_RUN_RANK: dict[str, int] = {
    RunStatus.PENDING: 0,
    RunStatus.RUNNING: 1,
    **dict.fromkeys(TERMINAL_RUN_STATUSES, 2),
}


def run_status_rank(status: object) -> int:
    """Position in the run-status order; -1 for a missing or unknown value (anything may replace it)."""
    return _RUN_RANK.get(status, -1) if isinstance(status, str) else -1


def is_forward(current: object, new: RunStatus) -> bool:
    """True when writing `new` over `current` moves the run forward (never sideways between terminals)."""
    return run_status_rank(new) > run_status_rank(current)


@dataclass(frozen=True)
class AdvancePlan:
    """What advance_flow writes for one snapshot; `changed` False means write nothing."""

    reason: str  # for the log line: why this plan (or why nothing)
    ready_step_ids: tuple[str, ...] = ()  # PENDING steps to set READY, sorted
    run_status: RunStatus | None = None  # new run status; None when unchanged
    run_error: ErrorDocument | None = None  # run-level error{code,message,details}, only with FAILED

    @property
    def changed(self) -> bool:
        return bool(self.ready_step_ids) or self.run_status is not None

    def updates(self) -> dict[tuple[str, ...], Any]:
        """The plan as field path (tuple of segments, unquoted) -> new value, for a store's update."""
        out: dict[tuple[str, ...], Any] = {
            ("steps", sid, "status"): StepStatus.READY.value for sid in self.ready_step_ids
        }
        if self.run_status is not None:
            out[("status",)] = self.run_status.value
        if self.run_error is not None:
            out[("error",)] = self.run_error
        return out


def settled_run_status(step_statuses: Mapping[str, str]) -> RunStatus:
    """The run status for the step statuses after advancing (no PENDING step is left satisfiable).

    FAILED if any step FAILED; SUCCEEDED if every step is SUCCEEDED/SKIPPED (vacuously so for no
    steps); RUNNING while a step is READY or RUNNING; otherwise nothing can move any more and the
    remaining steps are CANCELLED or wait on a CANCELLED step: CANCELLED.
    """
    values = set(step_statuses.values())
    if StepStatus.FAILED in values:
        return RunStatus.FAILED
    if values <= DONE_STEP_STATUSES:
        return RunStatus.SUCCEEDED
    if values & ACTIVE_STEP_STATUSES:
        return RunStatus.RUNNING
    return RunStatus.CANCELLED


def satisfiable_step_ids(steps: Mapping[str, StepDocument]) -> tuple[str, ...]:
    """PENDING steps whose dependsOn are all SUCCEEDED or SKIPPED, sorted. Expects a valid graph."""
    return tuple(
        sorted(
            step_id
            for step_id, step in steps.items()
            if step["status"] == StepStatus.PENDING
            and all(steps[dep]["status"] in DONE_STEP_STATUSES for dep in step.get("dependsOn", []))
        )
    )


def plan_advance(flow_run: FlowRunDocument) -> AdvancePlan:
    """The plan for one flow_run snapshot. Precedence: terminal run (final) > cancel flag >
    invalid document > a FAILED step > advancing. Never raises on a malformed document."""
    current = flow_run.get("status")
    if is_one_of(current, TERMINAL_RUN_STATUSES):
        return AdvancePlan(f"run is {current}, which is final")
    if flow_run.get(CANCEL_FLAG) is True:
        return AdvancePlan(f"{CANCEL_FLAG} is set", run_status=RunStatus.CANCELLED)
    problems = find_problems(flow_run)
    if problems:
        error = StepError(ErrorCode.FLOW_RUN_INVALID, problems.message(), problems.details())
        return AdvancePlan(error.message, run_status=RunStatus.FAILED, run_error=error.to_dict())
    steps = flow_run["steps"]  # find_problems found a steps map of valid steps
    failed = sorted(sid for sid, step in steps.items() if step["status"] == StepStatus.FAILED)
    if failed:
        return AdvancePlan(f"step(s) FAILED: {', '.join(failed)}", run_status=RunStatus.FAILED)
    ready = satisfiable_step_ids(steps)
    after = {sid: StepStatus.READY if sid in ready else step["status"] for sid, step in steps.items()}
    status = settled_run_status(after)
    reason = f"{len(ready)} step(s) READY: {', '.join(ready)}" if ready else "no step to advance"
    return AdvancePlan(
        f"{reason}; run {status}",
        ready_step_ids=ready,
        run_status=status if is_forward(current, status) else None,
    )


def apply_plan(flow_run: FlowRunDocument, plan: AdvancePlan) -> FlowRunDocument:
    """A copy of `flow_run` with the plan applied; the input is left untouched.

    Meant for the snapshot the plan was made from (local store, tests). Each move is still
    checked against the document, so it never regresses one: nothing on a terminal run, a step
    only PENDING -> READY, the run status only forward, the run error only with FAILED.
    """
    out: FlowRunDocument = {**flow_run}
    if is_one_of(out.get("status"), TERMINAL_RUN_STATUSES):
        return out
    steps = flow_run.get("steps")
    if plan.ready_step_ids and isinstance(steps, Mapping):
        new_steps = {**steps}
        for step_id in plan.ready_step_ids:
            step = steps.get(step_id)
            if isinstance(step, Mapping) and step.get("status") == StepStatus.PENDING:
                new_steps[step_id] = {**step, "status": StepStatus.READY.value}
        out["steps"] = new_steps
    if plan.run_status is not None and is_forward(out.get("status"), plan.run_status):
        out["status"] = plan.run_status.value
        if plan.run_error is not None and plan.run_status is RunStatus.FAILED:
            out["error"] = {**plan.run_error}
    return out


NEW_RUN_STATUS = RunStatus.PENDING  # a run advance_flow has not looked at yet


def as_new_run(document: FlowRunDocument) -> FlowRunDocument:
    """The document as a new run is created: status PENDING, whatever it says. advance_flow
    owns the run status, and its first write (PENDING -> RUNNING) is the update that brings
    the run's READY steps to their workers, whose triggers fire on updates only."""
    return {**document, "status": NEW_RUN_STATUS.value}
