"""FlowRunStore over `flow_runs/{runId}`: executes the core's claim and finalize plans
(core/step_rules.py).

- The claim is one Firestore transaction (worker contract §3.1) and no read before it: the
  caller's event showed the step READY, and a stale event is refused by the transaction's
  own read (its empty commit frees the lock).
- The finalize is a compare-and-set, as the error model recommends for `flow_runs`: the plan
  is made from one version of the run document and written, with the lease's deletion, on
  the condition that the document is still that version (its `update_time`). Firestore
  commits it only if no other write landed in between. It starts from the version our claim
  committed (remembered per run), so it is ONE commit unless another step of the run was
  written meanwhile; then the document is read, the plan made again (a refusal is returned
  as it is) and written on that version. After `max_attempts` such losses it raises
  TransientStoreError, which its caller retries within its budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    BatchCommitter,
    RpcOptions,
    TransactionRunner,
    Version,
    commit_batch,
    run_transaction,
    snapshot_dict,
)
from worker_chart_export.adapters.firestore.errors import is_contention, outage_error, translated
from worker_chart_export.core.errors import RedeliverEvent, TransientStoreError
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
from worker_chart_export.core.types import (
    ClaimOutcome,
    ClaimStatus,
    FinalizeOutcome,
    JsonDict,
    StepFinal,
)


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


REMEMBERED_RUNS = 1024


@dataclass(frozen=True)
class _ClaimRequest:
    """One claim's inputs, and the core's rules applied to them."""

    run_id: str
    step_id: str
    token: str
    now: datetime
    lease_expires_at: datetime

    def plan(self, document: JsonDict | None) -> ClaimPlan | ClaimOutcome:
        return plan_claim(
            document,
            self.run_id,
            self.step_id,
            token=self.token,
            now=self.now,
            lease_expires_at=self.lease_expires_at,
        )

    def refusal(self, document: JsonDict | None) -> ClaimOutcome | None:
        return claim_refusal(self.run_id, self.step_id, document)

    def confirmed(self, document: JsonDict | None) -> ClaimOutcome | None:
        return confirmed_claim(
            document, self.step_id, token=self.token, now=self.now, lease_expires_at=self.lease_expires_at
        )


class _WrittenVersions:
    """The version of each run document this store wrote last (its claims), so the finalize
    can write on it without reading first. Bounded: a step that never finalizes (a crash)
    must not keep its entry for ever; a forgotten entry only costs a read."""

    def __init__(self, capacity: int = REMEMBERED_RUNS) -> None:
        self._capacity = capacity
        self._versions: OrderedDict[str, Version] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, run_id: str, version: Version) -> None:
        with self._lock:
            self._versions[run_id] = version
            self._versions.move_to_end(run_id)
            while len(self._versions) > self._capacity:
                self._versions.popitem(last=False)

    def recall(self, run_id: str) -> Version | None:
        with self._lock:
            return self._versions.get(run_id)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._versions.pop(run_id, None)


class FirestoreFlowRunStore:
    """FlowRunStore over `flow_runs/{runId}`; a claim also writes the step's lease into
    `step_leases/{digest}` in the same commit, and its finalize deletes it."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = FLOW_RUNS_COLLECTION,
        leases_collection: str = STEP_LEASES_COLLECTION,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        max_attempts: int = DEFAULT_TRANSACTION_ATTEMPTS,
        run_in_transaction: TransactionRunner = run_transaction,
        commit: BatchCommitter = commit_batch,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self._client = client
        self._collection = client.collection(collection)
        self._leases = client.collection(leases_collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = max_attempts
        self._run_in_transaction = run_in_transaction
        self._commit = commit
        self._written = _WrittenVersions()

    def _read(self, ref: firestore.DocumentReference, transaction: Any = None) -> JsonDict | None:
        return snapshot_dict(self._rpc.get(ref, transaction))

    def _read_version(self, ref: firestore.DocumentReference) -> Version | None:
        snapshot = self._rpc.get(ref)
        document = snapshot_dict(snapshot)
        return None if document is None else Version(document, snapshot.update_time)

    def _finalize_on(
        self, version: Version, ref: firestore.DocumentReference, plan: FinalizePlan, lease: Any
    ) -> bool:
        """The plan on the run document only if it is still `version`, with the lease's
        deletion, in one commit; False when the document changed (or went) meanwhile."""
        batch = self._client.batch()
        option = self._client.write_option(last_update_time=version.update_time)
        batch.update(ref, finalize_update(plan), option=option)
        batch.delete(lease)  # ours: the step held our token in that version
        try:
            self._commit(batch, self._rpc)
        except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
            return False
        return True

    # --- claim ---

    def claim_step(
        self, run_id: str, step_id: str, *, token: str, now: datetime, lease_expires_at: datetime
    ) -> ClaimOutcome:
        operation = f"claim of step {step_id} in flow_runs/{run_id}"
        ref = self._collection.document(run_id)
        request = _ClaimRequest(run_id, step_id, token, now, lease_expires_at)
        committed: list[firestore.Transaction] = []

        def claim(transaction: firestore.Transaction) -> ClaimOutcome:
            # Re-run by the client on contention: no side effects, everything from the inputs.
            plan = request.plan(self._read(ref, transaction))
            if isinstance(plan, ClaimOutcome):
                return plan
            transaction.update(ref, claim_update(plan))
            transaction.set(self._lease_ref(run_id, step_id), lease_fields(run_id, plan))
            committed[:] = [transaction]
            return plan.outcome()

        try:
            # No read before the transaction: the event that brought us here showed the step
            # READY, and a stale event is refused inside it (an empty commit frees the lock).
            outcome = self._run_in_transaction(
                self._client, claim, max_attempts=self._max_attempts, rpc=self._rpc
            )
        except Exception as exc:
            if is_contention(exc):
                return self._after_contention(ref, request)
            outage = outage_error(exc, operation)
            if outage is None:
                raise
            # Did our commit land although its answer was lost? Then only this invocation
            # can finish the step: a redelivery would find it RUNNING and do nothing.
            confirmed = self._confirmed(ref, request)
            if confirmed is not None:
                return confirmed
            raise outage from exc
        self._remember_claim(run_id, outcome, committed)
        return outcome

    def _remember_claim(
        self, run_id: str, outcome: ClaimOutcome, committed: list[firestore.Transaction]
    ) -> None:
        """The version our claim wrote (its commit's update time), for the finalize to write on."""
        results = getattr(committed[0], "write_results", None) if committed else None
        if outcome.status is ClaimStatus.CLAIMED and outcome.flow_run is not None and results:
            self._written.remember(run_id, Version(outcome.flow_run, results[0].update_time))

    def _confirmed(self, ref: firestore.DocumentReference, request: _ClaimRequest) -> ClaimOutcome | None:
        try:
            document = self._read(ref)
        except Exception:
            return None  # still unreachable: the caller reports the outage
        return request.confirmed(document)

    def _after_contention(self, ref: firestore.DocumentReference, request: _ClaimRequest) -> ClaimOutcome:
        # The client gave up: whoever won decides. A step still READY means nobody won
        # (yet), so the event must come again rather than be acknowledged as a no-op.
        operation = f"claim of step {request.step_id} in flow_runs/{request.run_id}"
        with translated(f"{operation} (re-read after contention)", contention=False):
            document = self._read(ref)
        refusal = request.refusal(document)
        if refusal is not None:
            return ClaimOutcome(refusal.status, f"{refusal.reason} (lost the claim race)")
        raise RedeliverEvent(f"{operation}: transaction gave up on contention and the step is still READY")

    # --- finalize ---

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeOutcome:
        operation = f"finalize of step {step_id} in flow_runs/{run_id}"
        ref = self._collection.document(run_id)
        lease = self._lease_ref(run_id, step_id)
        with translated(operation):
            version, fresh = self._written.recall(run_id), False
            if version is None:
                version, fresh = self._read_version(ref), True
            for _ in range(self._max_attempts):
                document = version.doc if version is not None else None
                decided = plan_finalize(document, run_id, step_id, token=token, final=final)
                if isinstance(decided, FinalizeOutcome):
                    if fresh:
                        self._written.forget(run_id)
                        return decided
                elif version is not None and self._finalize_on(version, ref, decided, lease):
                    self._written.forget(run_id)
                    return finalized(step_id)
                version, fresh = self._read_version(ref), True
        # other workers update the same run document: contention, like an outage, is for
        # the caller to retry within its finalize budget
        raise TransientStoreError(f"{operation}: the document changed under {self._max_attempts} tries")

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
