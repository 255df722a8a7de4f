"""The claim, the finalize and the fence of a FlowRunStore that holds its runs in this
process: core's plans (core/step/step_rules.py) applied to a document loaded and saved under
one lock, written once for run-local's file store (adapters/local.py: load/save the state
file) and the in-memory store of the tests (worker_chart_export.testing: dicts, with leases).
Firestore needs a compare-and-set where these hold a lock.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.step.reaping import ReapPlan, lease_document, moved_lease, plan_reap
from worker_chart_export.core.step.step_rules import (
    RunVersion,
    apply_to_step,
    claim_is_current,
    finalized,
    plan_claim,
    plan_finalize,
    step_of,
)
from worker_chart_export.core.types import ClaimResult, FinalizeResult, StepFinal

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


class PlannedFlowRuns:
    """A subclass supplies the lock and where a run is loaded from and saved to, and may keep
    the step's lease (`_lease_written`, `_lease_deleted`: nothing by default)."""

    def _locked(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _load(self, run_id: str) -> FlowRunDocument | None:
        raise NotImplementedError

    def _save(self, run_id: str, document: FlowRunDocument) -> None:
        raise NotImplementedError

    def _lease_written(self, run_id: str, step_id: str, lease: dict[str, Any]) -> None:
        """The claim's lease document, written with the run."""

    def _lease_deleted(self, run_id: str, step_id: str) -> None:
        """The finalize deletes the step's lease with the run's write."""

    def _lease_moved(self, run_id: str, step_id: str, fields: dict[str, Any]) -> None:
        """A step that waits keeps its lease, moved to the wait's end (`fields` merged in)."""

    def claim_step(
        self,
        run_id: str,
        step_id: str,
        *,
        token: str,
        now: datetime,
        lease_expires_at: datetime,
        seen: RunVersion | None = None,
    ) -> ClaimResult:
        # `seen` is not needed here: the lock makes read, plan and write one step
        with self._locked():
            document = self._load(run_id)
            plan = plan_claim(
                document, run_id, step_id, token=token, now=now, lease_expires_at=lease_expires_at
            )
            if isinstance(plan, ClaimResult):
                return plan
            assert document is not None  # the plan found the step in it
            apply_to_step(document["steps"][step_id], plan)
            self._save(run_id, document)
            self._lease_written(run_id, step_id, lease_document(run_id, plan))
            return plan.outcome()

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        with self._locked():
            document = self._load(run_id)
            plan = plan_finalize(document, run_id, step_id, token=token, final=final)
            if isinstance(plan, FinalizeResult):
                return plan
            assert document is not None
            apply_to_step(document["steps"][step_id], plan)
            self._save(run_id, document)
            if plan.lease_until is None:
                self._lease_deleted(run_id, step_id)
            else:
                self._lease_moved(run_id, step_id, moved_lease(run_id, step_id, token, plan.lease_until))
            return finalized(step_id)

    def take_back(self, run_id: str, step_id: str, *, now: datetime, max_attempts: int) -> ReapPlan | None:
        """The reaper's plan for the step as it is now, under whatever claim holds it, applied:
        run-local's own reaper, for a step that waited (its file store keeps no leases)."""
        with self._locked():
            document = self._load(run_id)
            step = step_of(document, step_id)
            token = step.get("claimToken") if step is not None else None
            if document is None or not isinstance(token, str):
                return None
            plan = plan_reap(document, step_id, token=token, now=now, max_attempts=max_attempts)
            if plan is not None:
                apply_to_step(document["steps"][step_id], plan)
                self._save(run_id, document)
                self._lease_deleted(run_id, step_id)
            return plan

    def claim_is_current(self, run_id: str, step_id: str, token: str) -> bool:
        with self._locked():
            return claim_is_current(self._load(run_id), step_id, token)
