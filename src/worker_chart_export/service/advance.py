"""advance_flow (orchestration rules): which steps become READY and the run's status, from
one version of the flow_run.

The rules are core/flow/flow_rules.py's. The write is conditional on the version the plan was
made from (its update time, which the event carries): one RPC, no transaction, no read.
A duplicate or reordered event carries an older version, loses the precondition and is a
no-op; the newer version comes with its own event. Our own write comes back as an event
too, and plans to nothing: that is where the chain of events stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from worker_chart_export.core.flow.flow_rules import AdvancePlan, plan_advance

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


class AdvanceStore(Protocol):
    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        """Write the plan onto that version only; False when the document moved on."""
        ...


class AdvanceEffect(StrEnum):
    UNCHANGED = "UNCHANGED"  # nothing to do: the usual case, our own write included
    WRITTEN = "WRITTEN"
    STALE = "STALE"  # the document changed since this version: its own event decides


@dataclass(frozen=True)
class AdvanceResult:
    run_id: str
    plan: AdvancePlan
    outcome: AdvanceEffect

    def log_fields(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "outcome": self.outcome.value,
            "readySteps": list(self.plan.ready_step_ids),
            "runStatus": self.plan.run_status.value if self.plan.run_status else None,
            "error": self.plan.run_error,
            "reason": self.plan.reason,
        }


def advance_version(
    run_id: str, document: FlowRunDocument, update_time: datetime, store: AdvanceStore
) -> AdvanceResult:
    plan = plan_advance(document)
    if not plan.changed:
        return AdvanceResult(run_id, plan, AdvanceEffect.UNCHANGED)
    written = store.write_advance(run_id, plan, last_update_time=update_time)
    return AdvanceResult(run_id, plan, AdvanceEffect.WRITTEN if written else AdvanceEffect.STALE)
