"""In memory: the flow_runs and step_leases collections as two dicts, the local twin of
adapters/firestore's FirestoreFlowRunStore and FirestoreLeaseReaper (procrastinate's in-memory
connector is the model). A claim writes the step's lease with the run, a finalize deletes it
(adapters/planned_flow_runs.py, as run-local's file store does), the reaper takes expired ones
back: the same core plans the Firestore adapters commit (core/step/step_rules.py,
core/step/reaping.py), each executed atomically under one lock where Firestore needs a
compare-and-set. For tests of the services without an emulator.
"""

from __future__ import annotations

import copy
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker_chart_export.adapters.planned_flow_runs import PlannedFlowRuns
from worker_chart_export.core.naming import LEASE_EXPIRY_FIELD, lease_document_id, rfc3339_utc
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate, decide_reap
from worker_chart_export.core.step.step_rules import apply_to_step

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


class InMemoryFlowRuns(PlannedFlowRuns):
    """A FlowRunStore and a LeaseReaper over `runs` (runId -> flow_run document) and `leases`
    (lease_document_id -> step_leases document). Both are plain dicts a test may read, or
    write to set up what no method makes (a stray lease, a renewed one)."""

    def __init__(self, runs: dict[str, FlowRunDocument] | None = None) -> None:
        self.runs: dict[str, FlowRunDocument] = copy.deepcopy(runs or {})
        self.leases: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def lease_of(self, run_id: str, step_id: str) -> dict[str, Any] | None:
        return self.leases.get(lease_document_id(run_id, step_id))

    # --- FlowRunStore: PlannedFlowRuns' claim, finalize and fence, over the dicts

    def _locked(self) -> threading.Lock:
        return self._lock

    def _load(self, run_id: str) -> FlowRunDocument | None:
        return self.runs.get(run_id)

    def _save(self, run_id: str, document: FlowRunDocument) -> None:
        """Nothing to do: the plan was applied to the document in `runs` itself."""

    def _lease_written(self, run_id: str, step_id: str, lease: dict[str, Any]) -> None:
        self.leases[lease_document_id(run_id, step_id)] = lease

    def _lease_deleted(self, run_id: str, step_id: str) -> None:
        self.leases.pop(lease_document_id(run_id, step_id), None)

    def _lease_moved(self, run_id: str, step_id: str, fields: dict[str, Any]) -> None:
        key = lease_document_id(run_id, step_id)
        self.leases[key] = {**self.leases.get(key, {}), **fields}

    # --- LeaseReaper

    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]:
        """Leases with expiresAt <= now, soonest first, as Firestore's query returns them."""
        cutoff = rfc3339_utc(now)
        with self._lock:
            found = [
                (str(data[LEASE_EXPIRY_FIELD]), document_id, data)
                for document_id, data in self.leases.items()
                if isinstance(data.get(LEASE_EXPIRY_FIELD), str) and data[LEASE_EXPIRY_FIELD] <= cutoff
            ]
        found.sort(key=lambda entry: entry[:2])
        leases = (ExpiredLease.from_document(document_id, data) for _, document_id, data in found[:limit])
        return [lease for lease in leases if lease is not None]

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate:
        with self._lock:
            run = self.runs.get(lease.run_id)
            decision = decide_reap(
                lease, self.leases.get(lease.document_id), run, now=now, max_attempts=max_attempts
            )
            if decision.plan is not None:
                assert run is not None  # the plan found the step in it
                apply_to_step(run["steps"][lease.step_id], decision.plan)
            if decision.delete_lease:
                del self.leases[lease.document_id]
            return decision.outcome
