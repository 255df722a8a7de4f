"""The reaper's view of Firestore: `step_leases` (one document per claimed step, written by the
claim and deleted by the finalize, each in its commit on the run document) and the conditional
write that takes an expired step back (core/step/reaping.py `decide_reap`).

The query `expiresAt <= now` uses the single-field index Firestore keeps on `expiresAt` by
default (deploy/firestore.indexes.json states it explicitly); it touches only leases, never
every run.

A reap is a compare-and-set, like the claim and the finalize, with no transaction and no
lock on the run: the lease and the run are read (one BatchGet), the plan made from those
versions, and the run's update and the lease's deletion committed together on the condition
that neither document changed since. When one did (the step was finalized or claimed again
meanwhile), both are read again and the plan made again.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    BatchCommitter,
    RpcOptions,
    Version,
    commit_batch,
    version_of,
)
from worker_chart_export.adapters.firestore.exception_map import CHANGED_MEANWHILE, translated
from worker_chart_export.adapters.firestore.run_documents import step_field
from worker_chart_export.core.documents import as_flow_run
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.naming import (
    FLOW_RUNS_COLLECTION,
    LEASE_EXPIRY_FIELD,
    STEP_LEASES_COLLECTION,
    rfc3339_utc,
)
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate, decide_reap

if TYPE_CHECKING:
    from worker_chart_export.core.documents import StepUpdate


def reap_update(step_id: str, set_fields: StepUpdate, delete_fields: tuple[str, ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {step_field(step_id, k): v for k, v in set_fields.items()}
    fields.update({step_field(step_id, k): firestore.DELETE_FIELD for k in delete_fields})
    return fields


class FirestoreLeaseReaper:
    def __init__(
        self,
        client: firestore.Client,
        *,
        flow_runs_collection: str = FLOW_RUNS_COLLECTION,
        leases_collection: str = STEP_LEASES_COLLECTION,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        max_attempts: int = DEFAULT_TRANSACTION_ATTEMPTS,
        commit: BatchCommitter = commit_batch,
    ) -> None:
        self._client = client
        self._runs = client.collection(flow_runs_collection)
        self._leases = client.collection(leases_collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = max_attempts
        self._commit = commit

    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]:
        query = (
            self._leases.where(filter=FieldFilter(LEASE_EXPIRY_FIELD, "<=", rfc3339_utc(now)))
            .order_by(LEASE_EXPIRY_FIELD)
            .limit(limit)
        )
        with translated("query of expired step_leases", contention=False):
            snapshots = list(query.stream(retry=self._rpc.retry, timeout=self._rpc.timeout))
        return [
            lease for s in snapshots if (lease := ExpiredLease.from_document(s.id, s.to_dict())) is not None
        ]

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate:
        """`max_attempts`: the step's (STEP_MAX_ATTEMPTS), not this write's tries."""
        operation = f"reap of step {lease.step_id} in flow_runs/{lease.run_id}"
        run_ref = self._runs.document(lease.run_id)
        lease_ref = self._leases.document(lease.document_id)
        with translated(operation):
            for _ in range(self._max_attempts):
                lease_version, run_version = self._read(lease_ref, run_ref)
                outcome = self._reap_on(lease, lease_version, run_version, now=now, max_attempts=max_attempts)
                if outcome is not None:
                    return outcome
        raise TransientStoreError(f"{operation}: the documents changed under {self._max_attempts} tries")

    def _read(
        self, lease_ref: firestore.DocumentReference, run_ref: firestore.DocumentReference
    ) -> tuple[Version, Version]:
        """The lease and the run, in one round trip and without a lock."""
        found = {
            s.reference.path: version_of(s) for s in self._rpc.get_all(self._client, [lease_ref, run_ref])
        }
        absent = Version(None, None)
        return found.get(lease_ref.path, absent), found.get(run_ref.path, absent)

    def _reap_on(
        self,
        lease: ExpiredLease,
        lease_version: Version,
        run_version: Version,
        *,
        now: datetime,
        max_attempts: int,
    ) -> LeaseFate | None:
        """The decision from these versions, committed only while both are current: its
        outcome, or None when either document changed before the commit (read and decide again)."""
        run_now = as_flow_run(run_version.doc)
        decision = decide_reap(lease, lease_version.doc, run_now, now=now, max_attempts=max_attempts)
        if not decision.delete_lease:
            return decision.outcome  # nothing to write
        batch = self._client.batch()
        if decision.plan is not None:
            fields = reap_update(decision.plan.step_id, decision.plan.set_fields, decision.plan.delete_fields)
            batch.update(self._runs.document(lease.run_id), fields, option=self._unchanged_since(run_version))
        lease_ref = self._leases.document(lease.document_id)
        batch.delete(lease_ref, option=self._unchanged_since(lease_version))
        try:
            self._commit(batch, self._rpc)
        except CHANGED_MEANWHILE:
            return None
        return decision.outcome

    def _unchanged_since(self, version: Version) -> Any:
        return self._client.write_option(last_update_time=version.update_time)
