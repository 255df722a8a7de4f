"""Which step of a flow_run this worker takes (contract §2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from worker_chart_export.core.exceptions import StepSelectionError
from worker_chart_export.core.step.step_rules import is_ready_chart_export, steps_of
from worker_chart_export.core.step.step_types import handles
from worker_chart_export.core.types import CHART_EXPORT

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


def ready_chart_export_step_ids(flow_run: FlowRunDocument) -> list[str]:
    """READY CHART_EXPORT steps in the deterministic order: step id, plain string sort."""
    return ready_step_ids_in(steps_of(flow_run))


def ready_step_ids_in(steps: Mapping[str, Mapping[str, object]]) -> list[str]:
    """The same, of a steps map (an event's skim has only that)."""
    return sorted(
        step_id
        for step_id, step in steps.items()
        if isinstance(step, Mapping) and is_ready_chart_export(step)
    )


def choose_step(flow_run: FlowRunDocument, step_id: str | None = None) -> str | None:
    """The step to run: `step_id` if given (it must be a CHART_EXPORT step, any status —
    the claim decides whether it is still READY), else the first READY CHART_EXPORT step,
    else None."""
    if step_id is None:
        ready = ready_chart_export_step_ids(flow_run)
        return ready[0] if ready else None
    step = steps_of(flow_run).get(step_id)
    if not isinstance(step, Mapping):
        known = ", ".join(sorted(steps_of(flow_run))) or "none"
        raise StepSelectionError(f"step {step_id!r} not found in flow_run (steps: {known})")
    if not handles(step):
        raise StepSelectionError(
            f"step {step_id!r} has stepType {step.get('stepType')!r}, expected {CHART_EXPORT!r}"
        )
    return step_id
