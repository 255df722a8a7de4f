"""The reaper's view of Firestore: `step_leases` (one document per claimed step, written by the
claim and deleted by the finalize, in their transactions) and the conditional write that
takes an expired step back (core/step_rules.py `plan_reap`).

The query `expiresAt <= now` uses the single-field index Firestore keeps on `expiresAt` by
default (deploy/firestore.indexes.json states it explicitly); it touches only leases, never
every run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    RpcOptions,
    TransactionRunner,
    run_transaction,
    snapshot_dict,
)
from worker_chart_export.adapters.firestore.errors import translated
from worker_chart_export.adapters.firestore.flow_runs import step_field
from worker_chart_export.core.naming import (
    FLOW_RUNS_COLLECTION,
    LEASE_EXPIRY_FIELD,
    STEP_LEASES_COLLECTION,
    rfc3339_utc,
)
from worker_chart_export.core.reaping import ExpiredLease, ReapOutcome
from worker_chart_export.core.step_rules import claim_is_current, plan_reap


def reap_update(step_id: str, set_fields: dict[str, Any], delete_fields: tuple[str, ...]) -> dict[str, Any]:
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
        run_in_transaction: TransactionRunner = run_transaction,
    ) -> None:
        self._client = client
        self._runs = client.collection(flow_runs_collection)
        self._leases = client.collection(leases_collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._run_in_transaction = run_in_transaction

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

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> ReapOutcome:
        run_ref = self._runs.document(lease.run_id)
        lease_ref = self._leases.document(lease.document_id)

        def reap(transaction: firestore.Transaction) -> ReapOutcome:
            current = snapshot_dict(self._rpc.get(lease_ref, transaction))
            if current is None or current.get("claimToken") != lease.token:
                return ReapOutcome.SUPERSEDED  # claimed again meanwhile: a newer lease
            document = snapshot_dict(self._rpc.get(run_ref, transaction))
            plan = plan_reap(document, lease.step_id, token=lease.token, now=now, max_attempts=max_attempts)
            if plan is None:
                if not claim_is_current(document, lease.step_id, lease.token):
                    transaction.delete(lease_ref)  # the step finished or vanished: a stray lease
                    return ReapOutcome.CLEARED
                return ReapOutcome.NOT_EXPIRED
            transaction.update(run_ref, reap_update(plan.step_id, plan.set_fields, plan.delete_fields))
            transaction.delete(lease_ref)
            return ReapOutcome.RETRIED if plan.retried else ReapOutcome.FAILED

        with translated(f"reap of step {lease.step_id} in flow_runs/{lease.run_id}"):
            return self._run_in_transaction(
                self._client, reap, max_attempts=DEFAULT_TRANSACTION_ATTEMPTS, rpc=self._rpc
            )
