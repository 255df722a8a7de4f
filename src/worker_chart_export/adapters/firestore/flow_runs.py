"""FlowRunStore over `flow_runs/{runId}`: executes the core's claim and finalize plans
(core/step_rules.py), each as a compare-and-set: no transaction, no read lock on the run
document (error model, "Firestore contention notes"; docs/design.md, "Claim").

A plan is made from one version of the run document and committed, with the step's lease
document, on the condition that the run document is still that version (its
`update_time`). Firestore applies the commit atomically, all its writes or none, and only if
no other write landed in between; contenders wait for nobody and nothing is locked.

- The claim plans from the version its caller saw (the event's), else from a read: ONE
  commit when the event is current. When the commit loses its precondition the document is
  read at once: the step RUNNING under another token (the race was lost) or gone is the
  no-op it always was, RUNNING under ours is our commit (its answer lost); only a step still
  READY (another write of the run came first) is tried again, a few times with jitter, and
  then RedeliverEvent. An outage is settled the same way, by reading back.
- The finalize starts from the version our claim committed (remembered per run), so it is
  ONE commit unless another write of the run landed meanwhile; then the document is read,
  the plan made again (a refusal is returned as it is) and written on that version. After
  `max_attempts` such losses it raises TransientStoreError, which its caller retries within
  its budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    BatchCommitter,
    RpcOptions,
    Version,
    commit_batch,
    plain,
    snapshot_dict,
    version_of,
)
from worker_chart_export.adapters.firestore.errors import CHANGED_MEANWHILE, outage_error, translated
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.errors import RedeliverEvent, TransientStoreError
from worker_chart_export.core.flow_rules import AdvancePlan
from worker_chart_export.core.naming import (
    FLOW_RUNS_COLLECTION,
    LEASE_EXPIRY_FIELD,
    STEP_LEASES_COLLECTION,
    lease_document_id,
)
from worker_chart_export.core.step_rules import (
    CLAIM_TRIES,
    ClaimPlan,
    FinalizePlan,
    RunVersion,
    claim_is_current,
    claim_retry_wait,
    finalized,
    plan_claim,
    plan_finalize,
    settled_claim,
)
from worker_chart_export.core.types import (
    ClaimOutcome,
    ClaimStatus,
    FinalizeOutcome,
    JsonDict,
    StepFinal,
)

# what a store's commit adds to the batch besides the run document's update
BatchWrites = Callable[[firestore.WriteBatch], None]


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
        return plan_claim(document, self.run_id, self.step_id, **self._claim())

    def settled(self, document: JsonDict | None) -> ClaimOutcome | None:
        return settled_claim(document, self.run_id, self.step_id, **self._claim())

    def _claim(self) -> dict[str, Any]:
        return {"token": self.token, "now": self.now, "lease_expires_at": self.lease_expires_at}

    @property
    def operation(self) -> str:
        return f"claim of step {self.step_id} in flow_runs/{self.run_id}"


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
        claim_tries: int = CLAIM_TRIES,
        commit: BatchCommitter = commit_batch,
        clock: Clock,
    ) -> None:
        if max_attempts < 1 or claim_tries < 1:
            raise ValueError("max_attempts and claim_tries must be >= 1")
        self._client = client
        self._collection = client.collection(collection)
        self._leases = client.collection(leases_collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = max_attempts
        self._claim_tries = claim_tries
        self._commit = commit
        self._clock = clock
        self._written = _WrittenVersions()

    def _read(self, ref: firestore.DocumentReference) -> JsonDict | None:
        return snapshot_dict(self._rpc.get(ref))

    def _read_version(self, ref: firestore.DocumentReference) -> Version:
        return version_of(self._rpc.get(ref))

    def _commit_on(
        self, version: Version, ref: firestore.DocumentReference, fields: dict[str, Any], also: BatchWrites
    ) -> Any:
        """`fields` onto the run document only if it is still `version`, with what `also` adds,
        in one commit: the update time it gave the document, or None when the document changed
        (or went) meanwhile. Outages are raised as they come."""
        batch = self._client.batch()
        batch.update(ref, fields, option=self._client.write_option(last_update_time=version.update_time))
        also(batch)
        try:
            results = self._commit(batch, self._rpc)
        except CHANGED_MEANWHILE:
            return None
        return results[0].update_time

    # --- claim ---

    def claim_step(
        self,
        run_id: str,
        step_id: str,
        *,
        token: str,
        now: datetime,
        lease_expires_at: datetime,
        seen: RunVersion | None = None,
    ) -> ClaimOutcome:
        request = _ClaimRequest(run_id, step_id, token, now, lease_expires_at)
        ref = self._collection.document(run_id)
        # the event's document, in the values a read gives; without one, read first
        version = Version(plain(seen.document), seen.update_time) if seen is not None else None

        def one_try() -> ClaimOutcome | None:
            nonlocal version
            if version is None:
                version = self._read_for(request, ref, "read")
            outcome, version = self._claim_on(version, ref, request)
            return outcome

        retrying = Retrying(
            stop=stop_after_attempt(self._claim_tries),
            wait=claim_retry_wait(),
            retry=retry_if_result(lambda outcome: outcome is None),
            sleep=self._clock.sleep,
            retry_error_callback=_still_ready,
        )
        outcome: ClaimOutcome | None = retrying(one_try)
        if outcome is None:
            raise RedeliverEvent(
                f"{request.operation}: the step is still READY after {self._claim_tries} commits "
                "that lost to other writes of the run"
            )
        return outcome

    def _claim_on(
        self, version: Version, ref: firestore.DocumentReference, request: _ClaimRequest
    ) -> tuple[ClaimOutcome | None, Version | None]:
        """One claim commit planned from `version`: (the outcome, None) once settled, else
        (None, the version read after the commit lost: the step is still READY in it)."""
        plan = request.plan(version.doc)
        if isinstance(plan, ClaimOutcome):
            return plan, None
        lease = self._lease_ref(request.run_id, request.step_id)
        try:
            written = self._commit_on(
                version, ref, claim_update(plan), lambda b: b.set(lease, lease_fields(request.run_id, plan))
            )
        except Exception as exc:
            outage = outage_error(exc, request.operation)
            if outage is None:
                raise
            # Did our commit land although its answer was lost? Then only this invocation
            # can finish the step: a redelivery would find it RUNNING and do nothing.
            return self._settled_after_outage(ref, request, outage), None
        if written is not None:
            self._written.remember(request.run_id, Version(plan.claimed_document, written))
            return plan.outcome(), None
        # Lost: read at once, so a loser of the race learns it without waiting.
        fresh = self._read_for(request, ref, "read after a lost commit")
        outcome = self._settled(request, fresh)
        return outcome, None if outcome is not None else fresh

    def _read_for(self, request: _ClaimRequest, ref: firestore.DocumentReference, why: str) -> Version:
        with translated(f"{request.operation} ({why})", contention=False):
            return self._read_version(ref)

    def _settled(self, request: _ClaimRequest, fresh: Version) -> ClaimOutcome | None:
        outcome = request.settled(fresh.doc)
        if outcome is not None and outcome.status is ClaimStatus.CLAIMED:
            self._written.remember(request.run_id, fresh)  # ours: the finalize writes on it
        return outcome

    def _settled_after_outage(
        self, ref: firestore.DocumentReference, request: _ClaimRequest, outage: TransientStoreError
    ) -> ClaimOutcome:
        try:
            fresh = self._read_version(ref)
        except Exception as exc:
            raise outage from exc  # still unreachable: the caller reports the outage
        outcome = self._settled(request, fresh)
        if outcome is None:
            raise outage  # nothing of ours landed and the step is still READY: redeliver
        return outcome

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
                decided = plan_finalize(version.doc, run_id, step_id, token=token, final=final)
                if isinstance(decided, FinalizeOutcome):
                    if fresh:
                        self._written.forget(run_id)
                        return decided
                elif self._finalize_on(version, ref, decided, lease):
                    self._written.forget(run_id)
                    return finalized(step_id)
                version, fresh = self._read_version(ref), True
        # other workers update the same run document: contention, like an outage, is for
        # the caller to retry within its finalize budget
        raise TransientStoreError(f"{operation}: the document changed under {self._max_attempts} tries")

    def _finalize_on(
        self, version: Version, ref: firestore.DocumentReference, plan: FinalizePlan, lease: Any
    ) -> bool:
        # ours: the step held our token in that version, so its lease goes with it
        return self._commit_on(version, ref, finalize_update(plan), lambda b: b.delete(lease)) is not None

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


def _still_ready(state: RetryCallState) -> None:
    """Every claim commit lost to another write of the run while the step stayed READY."""
    return None
