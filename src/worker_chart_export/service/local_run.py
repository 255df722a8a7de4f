"""run-local's whole story of a step: chosen from the run as read once, executed, and, when a
bad window makes it wait, waited for, taken back (the reaper's plan, which run-local applies
itself) and executed again until it settles: the cloud's reaper and next event, in one
process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import moment_of, rfc3339_utc
from worker_chart_export.core.step.patience import waiting_step_ids
from worker_chart_export.core.step.selection import choose_step
from worker_chart_export.core.step.step_rules import step_of, steps_of
from worker_chart_export.logs import get_logger
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.step_context import StepReport

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


AT_ONCE = datetime.min.replace(tzinfo=UTC)  # a moment long past: no wait


@dataclass(frozen=True)
class LocalChoice:
    """The step run-local will run, from the run as read once: the READY step named (else the
    first READY CHART_EXPORT one), and the step waiting out a bad window with when it may
    be tried again (None: none)."""

    run_id: str
    ready: str | None
    waiting: str | None = None
    retry_at: datetime = AT_ONCE


def choose_local_step(flow_run: FlowRunDocument, step_id: str | None) -> LocalChoice:
    """Raises StepSelectionError for a `step_id` that is no CHART_EXPORT step of the run."""
    ready = choose_step(flow_run, step_id)
    waiting = _waiting(flow_run, step_id)
    retry_at = waiting_since(flow_run, waiting) if waiting is not None else AT_ONCE
    return LocalChoice(str(flow_run.get("runId")), ready, waiting, retry_at)


def execute_chosen_step(
    choice: LocalChoice,
    *,
    ports: Ports,
    limits: StepLimits,
    clock: Clock,
    take_back: TakeBack | None = None,
) -> StepReport:
    """run-local's one call: the chosen step executed, or a NOOP report when there is none.
    With `take_back` (the reaper's plan for a step whose wait is over, applied to the store),
    a step that waits, found so or left so by a bad window, is waited for, taken back and
    executed again until it settles: the cloud's reaper and next event, in one process."""
    run_id, chosen = choice.run_id, choice.ready
    waiting = choice.waiting if take_back is not None else None
    if chosen is None and waiting is None:
        code = ErrorCode.NO_READY_STEP.value
        get_logger().info("no READY CHART_EXPORT step: no-op", runId=run_id, code=code)
        message = "no READY CHART_EXPORT step in the flow_run"
        return StepReport(run_id, "", "NOOP", ports.chart_api.mode, error_code=code, message=message)
    if waiting is not None and take_back is not None:
        _wait_and_take_back(run_id, waiting, clock, take_back, retry_at=choice.retry_at)
        chosen = waiting
    assert chosen is not None
    report = execute_step(run_id, chosen, ports=ports, limits=limits, clock=clock)
    while take_back is not None and report.retry_at is not None:
        _wait_and_take_back(run_id, chosen, clock, take_back, retry_at=report.retry_at)
        report = execute_step(run_id, chosen, ports=ports, limits=limits, clock=clock)
    return report


# (run id, step id, now): the reaper's plan for the step, applied (None: nothing to take back)
TakeBack = Callable[[str, str, datetime], object]


def _waiting(flow_run: FlowRunDocument, step_id: str | None) -> str | None:
    """The step that waits out a bad window: the one named, else the first; None if none."""
    waiting = waiting_step_ids(steps_of(flow_run))
    if step_id is not None:
        return step_id if step_id in waiting else None
    return waiting[0] if waiting else None


def waiting_since(flow_run: FlowRunDocument, step_id: str) -> datetime:
    """When the waiting step may be tried again (at once, if that is unreadable)."""
    step = step_of(flow_run, step_id)
    return moment_of(step.get("retryAt") if step is not None else None) or AT_ONCE


def _wait_and_take_back(
    run_id: str, step_id: str, clock: Clock, take_back: TakeBack, *, retry_at: datetime
) -> None:
    seconds = max(0.0, (retry_at - clock.now()).total_seconds())
    get_logger().info(
        "waiting for the step's next attempt", runId=run_id, stepId=step_id, retryAt=rfc3339_utc(retry_at)
    )
    clock.sleep(seconds)
    take_back(run_id, step_id, clock.now())
