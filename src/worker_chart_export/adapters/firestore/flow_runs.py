"""FlowRunStore over `flow_runs/{runId}`: executes the core's claim and finalize plans
(core/step_rules.py) inside Firestore transactions.

Each operation first reads outside the transaction: a step nobody may claim or finalize
costs one read and no lock, and an unreachable Firestore fails within the RPC timeout.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    RpcOptions,
    TransactionRunner,
    run_transaction,
    snapshot_dict,
)
from worker_chart_export.adapters.firestore.errors import is_contention, outage_error, translated
from worker_chart_export.core.errors import RedeliverEvent
from worker_chart_export.core.flow_rules import AdvancePlan
from worker_chart_export.core.naming import (
    FLOW_RUNS_COLLECTION,
    LEASE_EXPIRY_FIELD,
    STEP_LEASES_COLLECTION,
    lease_document_id,
)
from worker_chart_export.core.step_rules import (
    ClaimPlan,
    FinalizePlan,
    claim_is_current,
    claim_refusal,
    confirmed_claim,
    finalized,
    plan_claim,
    plan_finalize,
)
from worker_chart_export.core.types import ClaimOutcome, FinalizeOutcome, JsonDict, StepFinal


def step_field(step_id: str, *fields: str) -> str:
    # FieldPath quotes ids with '-', '.', spaces or backticks; a dotted string would split them.
    return FieldPath("steps", step_id, *fields).to_api_repr()


def claim_update(plan: ClaimPlan) -> dict[str, Any]:
    fields: dict[str, Any] = {step_field(plan.step_id, k): v for k, v in plan.set_fields.items()}
    fields.update({step_field(plan.step_id, k): firestore.DELETE_FIELD for k in plan.delete_fields})
    return fields


def finalize_update(plan: FinalizePlan) -> dict[str, Any]:
    fields: dict[str, Any] = {step_field(plan.step_id, k): v for k, v in plan.set_fields.items()}
    if plan.delete_error:
        fields[step_field(plan.step_id, "error")] = firestore.DELETE_FIELD
    # merged key by key: outputs other workers or earlier attempts wrote stay in place
    fields.update({step_field(plan.step_id, "outputs", k): v for k, v in plan.set_outputs.items()})
    return fields


def lease_fields(run_id: str, plan: ClaimPlan) -> dict[str, Any]:
    """The step_leases document a claim writes: what the reaper needs, nothing else."""
    return {
        "runId": run_id,
        "stepId": plan.step_id,
        "claimToken": plan.claim.token,
        LEASE_EXPIRY_FIELD: plan.set_fields["leaseExpiresAt"],
        "attempt": plan.claim.attempt,
    }


def advance_update(plan: AdvancePlan) -> dict[str, Any]:
    return {FieldPath(*parts).to_api_repr(): value for parts, value in plan.updates().items()}


class FirestoreFlowRunStore:
    """FlowRunStore over `flow_runs/{runId}`; a claim also writes the step's lease into
    `step_leases/{digest}` in the same transaction, and its finalize deletes it."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = FLOW_RUNS_COLLECTION,
        leases_collection: str = STEP_LEASES_COLLECTION,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        max_transaction_attempts: int = DEFAULT_TRANSACTION_ATTEMPTS,
        run_in_transaction: TransactionRunner = run_transaction,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._leases = client.collection(leases_collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = max_transaction_attempts
        self._run_in_transaction = run_in_transaction

    def _read(self, ref: firestore.DocumentReference, transaction: Any = None) -> JsonDict | None:
        return snapshot_dict(self._rpc.get(ref, transaction))

    # --- claim ---

    def claim_step(
        self, run_id: str, step_id: str, *, token: str, now: datetime, lease_expires_at: datetime
    ) -> ClaimOutcome:
        operation = f"claim of step {step_id} in flow_runs/{run_id}"
        ref = self._collection.document(run_id)

        def claim(transaction: firestore.Transaction) -> ClaimOutcome:
            # Re-run by the client on contention: no side effects, everything from the inputs.
            plan = plan_claim(
                self._read(ref, transaction),
                run_id,
                step_id,
                token=token,
                now=now,
                lease_expires_at=lease_expires_at,
            )
            if isinstance(plan, ClaimOutcome):
                return plan
            transaction.update(ref, claim_update(plan))
            transaction.set(self._lease_ref(run_id, step_id), lease_fields(run_id, plan))
            return plan.outcome()

        try:
            refusal = claim_refusal(run_id, step_id, self._read(ref))
            if refusal is not None:
                return refusal  # no transaction, no lock for a step nobody may claim
            return self._run_in_transaction(self._client, claim, max_attempts=self._max_attempts)
        except Exception as exc:
            if is_contention(exc):
                return self._after_contention(ref, run_id, step_id, operation)
            outage = outage_error(exc, operation)
            if outage is None:
                raise
            # Did our commit land although its answer was lost? Then only this invocation
            # can finish the step: a redelivery would find it RUNNING and do nothing.
            confirmed = self._confirmed(ref, step_id, token, now, lease_expires_at)
            if confirmed is not None:
                return confirmed
            raise outage from exc

    def _confirmed(
        self,
        ref: firestore.DocumentReference,
        step_id: str,
        token: str,
        now: datetime,
        lease_expires_at: datetime,
    ) -> ClaimOutcome | None:
        try:
            document = self._read(ref)
        except Exception:
            return None  # still unreachable: the caller reports the outage
        return confirmed_claim(document, step_id, token=token, now=now, lease_expires_at=lease_expires_at)

    def _after_contention(
        self, ref: firestore.DocumentReference, run_id: str, step_id: str, operation: str
    ) -> ClaimOutcome:
        # The client gave up: whoever won decides. A step still READY means nobody won
        # (yet), so the event must come again rather than be acknowledged as a no-op.
        with translated(f"{operation} (re-read after contention)", contention=False):
            document = self._read(ref)
        refusal = claim_refusal(run_id, step_id, document)
        if refusal is not None:
            return ClaimOutcome(refusal.status, f"{refusal.reason} (lost the claim race)")
        raise RedeliverEvent(f"{operation}: transaction gave up on contention and the step is still READY")

    # --- finalize ---

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeOutcome:
        ref = self._collection.document(run_id)

        def plan(document: JsonDict | None) -> FinalizePlan | FinalizeOutcome:
            return plan_finalize(document, run_id, step_id, token=token, final=final)

        def finalize(transaction: firestore.Transaction) -> FinalizeOutcome:
            decided = plan(self._read(ref, transaction))
            if isinstance(decided, FinalizeOutcome):
                return decided
            transaction.update(ref, finalize_update(decided))
            transaction.delete(self._lease_ref(run_id, step_id))  # ours: the step held our token
            return finalized(step_id)

        # other workers update the same run document: contention, like an outage, is for
        # the caller to retry within its finalize budget
        with translated(f"finalize of step {step_id} in flow_runs/{run_id}"):
            early = plan(self._read(ref))
            if isinstance(early, FinalizeOutcome):
                return early
            return self._run_in_transaction(self._client, finalize, max_attempts=self._max_attempts)

    # --- the fence before the manifest, advance_flow's write ---

    def claim_is_current(self, run_id: str, step_id: str, token: str) -> bool:
        with translated(f"check of the claim on step {step_id} in flow_runs/{run_id}", contention=False):
            document = self._read(self._collection.document(run_id))
        return claim_is_current(document, step_id, token)

    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        """advance_flow's one write, only onto the version the plan was made from: False when
        the document changed since (a newer event brings the newer version) or is gone."""
        if not plan.changed:
            return False
        option = self._client.write_option(last_update_time=last_update_time)
        try:
            with translated(f"advance of flow_runs/{run_id}", contention=False):
                self._collection.document(run_id).update(advance_update(plan), option=option)
        except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
            return False
        return True

    def read_version(self, run_id: str) -> tuple[JsonDict, datetime] | None:
        """The document and its update time (what an event would carry); None if absent."""
        with translated(f"read of flow_runs/{run_id}", contention=False):
            snapshot = self._rpc.get(self._collection.document(run_id))
        if not snapshot.exists:
            return None
        return snapshot.to_dict() or {}, snapshot.update_time

    def _lease_ref(self, run_id: str, step_id: str) -> firestore.DocumentReference:
        return self._leases.document(lease_document_id(run_id, step_id))
