"""Firestore adapters: flow_runs claim/finalize, chart templates, CHART-IMG account usage.

Imported only on the work path (never on the no-op path), so google.cloud.firestore is
imported at module level here.

Error mapping shared by all adapters:
- contention (`Aborted`, or the client's "Failed to commit transaction in N attempts"):
  handled per operation (re-read for a claim, retry for a reservation, transient otherwise);
- unavailability (5xx, timeouts, the api_core retry giving up, gRPC UNAVAILABLE):
  `TransientStoreError`, whose message names the operation.
The client hides the real cause when a transaction cannot even begin: it raises
`ValueError("... cannot be rolled back")` with the RPC error as `__context__`, so the whole
exception chain is inspected, not just the top.

Bounds: every read we issue carries our own retry deadline and timeout (`rpc_timeout`).
BeginTransaction/Commit/Rollback accept neither through the transaction API and keep the
client's defaults (retry on UNAVAILABLE for up to 60 s). Claim and finalize therefore first
read the document outside the transaction: it is the cheap no-op path for a step that is not
claimable/finalizable, and it fails within `rpc_timeout` when Firestore is unreachable.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry, if_exception_type
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from worker_chart_export.core.errors import RedeliverEvent, TransientStoreError
from worker_chart_export.core.naming import is_safe_segment, rfc3339_utc
from worker_chart_export.core.types import (
    CHART_EXPORT,
    AccountUsage,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    FinalizeOutcome,
    JsonDict,
    Reservation,
    StepFinal,
    StepStatus,
)
from worker_chart_export.core.usage import current_usage, exhausted_fields, reserve_one

EMULATOR_DEFAULT_PROJECT = "demo-worker-chart-export"
DEFAULT_RPC_TIMEOUT_SECONDS = 10.0

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.InternalServerError,
    api_exceptions.ResourceExhausted,
    api_exceptions.RetryError,
    auth_exceptions.TransportError,  # token refresh could not reach the metadata server
)
_TRANSIENT_GRPC_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
_GAVE_UP_PREFIX = "Failed to commit transaction"
_MAX_MESSAGE_CHARS = 200
_T = TypeVar("_T")


def make_firestore_client(project: str | None, *, emulator_host: str | None = None) -> firestore.Client:
    """A Firestore client for `project`.

    The library itself points at the emulator and goes anonymous when FIRESTORE_EMULATOR_HOST
    is set. `emulator_host` (settings.firestore_emulator_host) only decides the default
    project: with an emulator and no project, `demo-worker-chart-export`; in production, None
    lets the library infer the project from the credentials (Cloud Run does not set
    GOOGLE_CLOUD_PROJECT), and a made-up project there would only produce PermissionDenied.
    """
    if project is None and emulator_host:
        project = EMULATOR_DEFAULT_PROJECT
    return firestore.Client(project=project)


# --- error classification -------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_contention(exc: BaseException) -> bool:
    """The transaction lost to concurrent writers (and the client may have given up retrying)."""
    return any(
        isinstance(e, api_exceptions.Aborted)
        or (isinstance(e, ValueError) and str(e).startswith(_GAVE_UP_PREFIX))
        for e in _chain(exc)
    )


def _transient_cause(exc: BaseException) -> BaseException | None:
    for e in _chain(exc):
        if isinstance(e, _TRANSIENT_TYPES):
            return e
        code = getattr(e, "code", None)
        if isinstance(e, grpc.RpcError) and callable(code) and code() in _TRANSIENT_GRPC_CODES:
            return e
    return None


def is_transient(exc: BaseException) -> bool:
    return _transient_cause(exc) is not None


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _transient_error(exc: BaseException, operation: str) -> TransientStoreError | None:
    cause = _transient_cause(exc)
    if cause is None:
        return None
    return TransientStoreError(f"{operation}: Firestore unavailable ({_describe(cause)})")


def _as_store_error(exc: BaseException, operation: str) -> TransientStoreError | None:
    """Contention the client gave up on, or an outage: both worth a retry by the caller."""
    if is_contention(exc):
        return TransientStoreError(f"{operation}: gave up on contention")
    return _transient_error(exc, operation)


def bounded_retry(rpc_timeout: float) -> Retry:
    # The client's defaults retry UNAVAILABLE for 60-300 s; a step budget cannot afford that.
    return Retry(
        predicate=if_exception_type(
            api_exceptions.ServiceUnavailable,
            api_exceptions.DeadlineExceeded,
            api_exceptions.InternalServerError,
            api_exceptions.ResourceExhausted,
        ),
        initial=0.1,
        maximum=1.0,
        multiplier=1.5,
        timeout=rpc_timeout,
    )


def _in_transaction(client: firestore.Client, max_attempts: int, body: Callable[..., _T], *args: Any) -> _T:
    """Run `body(transaction, *args)` under firestore.transactional, retried on contention.

    The wrapper is built per call on purpose: firestore.transactional() keeps the ids of the
    running transaction on the wrapper object, so one module-level decorated function shared
    by concurrent threads would mix their transactions up.
    """
    result: _T = firestore.transactional(body)(client.transaction(max_attempts=max_attempts), *args)
    return result


# --- documents as plain values --------------------------------------------------------


def _plain(value: Any) -> Any:
    """Firestore values as JSON-like values: timestamps become RFC 3339 UTC strings."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        moment = value.astimezone(UTC)
        spec = "milliseconds" if moment.microsecond % 1000 == 0 else "microseconds"
        return moment.isoformat(timespec=spec).replace("+00:00", "Z")
    if isinstance(value, firestore.DocumentReference):
        return value.path
    return value


def _step_path(step_id: str, *fields: str) -> str:
    # FieldPath quotes ids with '-', '.', spaces or backticks; a dotted string would split them.
    return FieldPath("steps", step_id, *fields).to_api_repr()


def _step_of(document: Mapping[str, Any] | None, step_id: str) -> Mapping[str, Any] | None:
    steps = (document or {}).get("steps")
    step = steps.get(step_id) if isinstance(steps, Mapping) else None
    return step if isinstance(step, Mapping) else None


# --- flow_runs ---------------------------------------------------------------------------


def _claim_refusal(run_id: str, step_id: str, document: Mapping[str, Any] | None) -> ClaimOutcome | None:
    """Why the step cannot be claimed, or None when it is a READY CHART_EXPORT step."""
    if document is None:
        return ClaimOutcome(ClaimStatus.NOT_FOUND, f"flow_run {run_id} does not exist")
    step = _step_of(document, step_id)
    if step is None:
        return ClaimOutcome(ClaimStatus.CONFLICT, f"step {step_id} does not exist")
    if step.get("stepType") != CHART_EXPORT:
        return ClaimOutcome(
            ClaimStatus.CONFLICT, f"step {step_id} is a {step.get('stepType')} step, not {CHART_EXPORT}"
        )
    if step.get("status") != StepStatus.READY:
        return ClaimOutcome(ClaimStatus.CONFLICT, f"step {step_id} is {step.get('status')}, not READY")
    return None


def _finalize_refusal(
    run_id: str, step_id: str, token: str, document: Mapping[str, Any] | None
) -> FinalizeOutcome | None:
    """Why finalize must not write, or None when the step is RUNNING under our token."""
    if document is None:
        return FinalizeOutcome(False, f"flow_run {run_id} deleted")
    step = _step_of(document, step_id)
    if step is None:
        return FinalizeOutcome(False, f"step {step_id} no longer exists")
    status = step.get("status")
    if status != StepStatus.RUNNING:
        # Ours when an earlier finalize landed although its answer was lost (e.g. a timeout).
        ours = " (finalized by this claim)" if step.get("claimToken") == token else ""
        return FinalizeOutcome(False, f"step {step_id} is {status}, not RUNNING{ours}")
    if step.get("claimToken") != token:
        return FinalizeOutcome(False, "claim token differs: another execution owns the step")
    return None


@dataclass(frozen=True)
class _ClaimRequest:
    run_id: str
    step_id: str
    token: str
    now: datetime
    lease_expires_at: datetime


def _claim_in_transaction(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    request: _ClaimRequest,
    retry: Retry,
    timeout: float,
) -> ClaimOutcome:
    # Re-run by the client on contention: no side effects, everything from the inputs.
    snapshot = ref.get(transaction=transaction, retry=retry, timeout=timeout)
    document = _plain(snapshot.to_dict()) if snapshot.exists else None
    refusal = _claim_refusal(request.run_id, request.step_id, document)
    if refusal is not None:
        return refusal
    assert document is not None  # for the type checker: _claim_refusal said it exists
    step = dict(document["steps"][request.step_id])
    previous = step.get("attempt")
    attempt = (previous if isinstance(previous, int) and not isinstance(previous, bool) else 0) + 1
    written = {
        "status": StepStatus.RUNNING.value,
        "startedAt": rfc3339_utc(request.now),
        "attempt": attempt,
        "claimToken": request.token,
        "leaseExpiresAt": rfc3339_utc(request.lease_expires_at),
    }
    fields: dict[str, Any] = {_step_path(request.step_id, k): v for k, v in written.items()}
    for stale in ("finishedAt", "error"):  # left by a previous attempt
        if stale in step:
            fields[_step_path(request.step_id, stale)] = firestore.DELETE_FIELD
            del step[stale]
    transaction.update(ref, fields)
    step.update(written)
    document["steps"] = {**document["steps"], request.step_id: step}
    return _claimed(request, attempt, document)


def _claimed(request: _ClaimRequest, attempt: int, document: JsonDict, how: str = "") -> ClaimOutcome:
    return ClaimOutcome(
        ClaimStatus.CLAIMED,
        f"step {request.step_id} claimed (attempt {attempt}{how})",
        document,
        Claim(request.token, attempt, request.now, request.lease_expires_at),
    )


def _finalize_in_transaction(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    run_id: str,
    step_id: str,
    token: str,
    fields: dict[str, Any],
    retry: Retry,
    timeout: float,
) -> FinalizeOutcome:
    snapshot = ref.get(transaction=transaction, retry=retry, timeout=timeout)
    document = snapshot.to_dict() if snapshot.exists else None
    refusal = _finalize_refusal(run_id, step_id, token, document)
    if refusal is not None:
        return refusal
    transaction.update(ref, fields)
    return FinalizeOutcome(True, f"step {step_id} finalized")


def _final_fields(step_id: str, final: StepFinal) -> dict[str, Any]:
    fields: dict[str, Any] = {
        _step_path(step_id, "status"): final.status.value,
        _step_path(step_id, "finishedAt"): rfc3339_utc(final.finished_at),
        _step_path(step_id, "error"): (
            final.error.to_dict() if final.error is not None else firestore.DELETE_FIELD
        ),
    }
    # merged key by key: outputs other workers or earlier attempts wrote stay in place
    for key, value in final.outputs.items():
        fields[_step_path(step_id, "outputs", key)] = value
    return fields


class FirestoreFlowRunStore:
    """FlowRunStore over `flow_runs/{runId}` (DESIGN §4 decisions 1 and 2)."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = "flow_runs",
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        max_transaction_attempts: int = 5,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._timeout = rpc_timeout
        self._retry = bounded_retry(rpc_timeout)
        self._max_attempts = max_transaction_attempts

    def _read(self, ref: firestore.DocumentReference) -> JsonDict | None:
        snapshot = ref.get(retry=self._retry, timeout=self._timeout)
        return _plain(snapshot.to_dict()) if snapshot.exists else None

    def claim_step(
        self, run_id: str, step_id: str, *, token: str, now: datetime, lease_expires_at: datetime
    ) -> ClaimOutcome:
        operation = f"claim of step {step_id} in flow_runs/{run_id}"
        ref = self._collection.document(run_id)
        request = _ClaimRequest(run_id, step_id, token, now, lease_expires_at)
        try:
            refusal = _claim_refusal(run_id, step_id, self._read(ref))
            if refusal is not None:
                return refusal  # no transaction, no lock for a step nobody may claim
            outcome: ClaimOutcome = _in_transaction(
                self._client,
                self._max_attempts,
                _claim_in_transaction,
                ref,
                request,
                self._retry,
                self._timeout,
            )
            return outcome
        except Exception as exc:
            if is_contention(exc):
                return self._after_contention(ref, request, operation)
            transient = _transient_error(exc, operation)
            if transient is None:
                raise
            confirmed = self._claim_confirmed(ref, request)
            if confirmed is not None:
                return confirmed
            raise transient from exc

    def _claim_confirmed(
        self, ref: firestore.DocumentReference, request: _ClaimRequest
    ) -> ClaimOutcome | None:
        """After an outage mid-claim: did our commit land although its answer was lost?

        The step then holds our token, and only this invocation can finish it: a redelivery
        would find it RUNNING and do nothing until the lease ran out.
        """
        try:
            document = self._read(ref)
        except Exception:
            return None  # still unreachable: the caller reports the outage
        step = ((document or {}).get("steps") or {}).get(request.step_id)
        if (
            not isinstance(step, dict)
            or step.get("claimToken") != request.token
            or step.get("status") != "RUNNING"
        ):
            return None
        attempt = step.get("attempt") if isinstance(step.get("attempt"), int) else 1
        assert document is not None  # a step was found in it
        return _claimed(request, attempt, document, "; commit confirmed by a re-read")

    def _after_contention(
        self, ref: firestore.DocumentReference, request: _ClaimRequest, operation: str
    ) -> ClaimOutcome:
        # The client gave up: whoever won decides. A step still READY means nobody won
        # (yet), so the event must come again rather than be acknowledged as a no-op.
        try:
            document = self._read(ref)
        except Exception as exc:
            transient = _transient_error(exc, f"{operation} (re-read after contention)")
            if transient is not None:
                raise transient from exc
            raise
        refusal = _claim_refusal(request.run_id, request.step_id, document)
        if refusal is not None:
            return ClaimOutcome(refusal.status, f"{refusal.reason} (lost the claim race)")
        raise RedeliverEvent(f"{operation}: transaction gave up on contention and the step is still READY")

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeOutcome:
        operation = f"finalize of step {step_id} in flow_runs/{run_id}"
        ref = self._collection.document(run_id)
        fields = _final_fields(step_id, final)
        try:
            refusal = _finalize_refusal(run_id, step_id, token, self._read(ref))
            if refusal is not None:
                return refusal
            outcome: FinalizeOutcome = _in_transaction(
                self._client,
                self._max_attempts,
                _finalize_in_transaction,
                ref,
                run_id,
                step_id,
                token,
                fields,
                self._retry,
                self._timeout,
            )
            return outcome
        except Exception as exc:
            # other workers update the same run document: contention, like an outage, is
            # for the caller to retry within its finalize budget
            store_error = _as_store_error(exc, operation)
            if store_error is None:
                raise
            raise store_error from exc


# --- chart_templates ---------------------------------------------------------------------


class FirestoreTemplateSource:
    """TemplateSource over `chart_templates/{id}` with a per-instance TTL cache.

    Missing templates are cached as missing for the same TTL, so a template synced later shows
    up within `ttl_seconds`. Ids that are not safe path segments are never looked up (they
    could not be valid template ids, and '/' would address another collection).
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = "chart_templates",
        ttl_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._ttl = ttl_seconds
        self._clock = clock
        self._timeout = rpc_timeout
        self._retry = bounded_retry(rpc_timeout)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, JsonDict | None]] = {}  # id -> (expires, doc)

    def get_templates(self, template_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        wanted = [t for t in dict.fromkeys(template_ids) if is_safe_segment(t)]
        now = self._clock()
        with self._lock:
            known = {t: self._cache[t] for t in wanted if t in self._cache and self._cache[t][0] > now}
        stale = [t for t in wanted if t not in known]
        if stale:
            # fetched outside the lock: a slow RPC must not block readers of cached entries
            fetched = self._fetch(stale)
            expires = now + self._ttl
            entries = {t: (expires, fetched.get(t)) for t in stale}
            with self._lock:
                self._cache.update(entries)
            known.update(entries)
        # copies: callers must not be able to alter the cache
        return {t: copy.deepcopy(doc) for t in wanted if (doc := known[t][1]) is not None}

    def _fetch(self, template_ids: list[str]) -> dict[str, JsonDict]:
        refs = [self._collection.document(t) for t in template_ids]
        try:
            snapshots = list(self._client.get_all(refs, retry=self._retry, timeout=self._timeout))
        except Exception as exc:
            transient = _transient_error(exc, f"read of chart_templates {', '.join(template_ids)}")
            if transient is not None:
                raise transient from exc
            raise
        return {s.id: _plain(s.to_dict()) for s in snapshots if s.exists}


# --- chart_img_accounts_usage --------------------------------------------------------------


def _reserve_in_transaction(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    account_id: str,
    default_limit: int,
    now: datetime,
    retry: Retry,
    timeout: float,
) -> Reservation:
    snapshot = ref.get(transaction=transaction, retry=retry, timeout=timeout)
    update, reservation = reserve_one(
        account_id, snapshot.to_dict() if snapshot.exists else None, default_limit=default_limit, now=now
    )
    if update is not None:
        transaction.set(ref, update, merge=True)
    return reservation


def _exhaust_in_transaction(
    transaction: firestore.Transaction,
    ref: firestore.DocumentReference,
    account_id: str,
    default_limit: int,
    now: datetime,
    retry: Retry,
    timeout: float,
) -> None:
    snapshot = ref.get(transaction=transaction, retry=retry, timeout=timeout)
    fields = exhausted_fields(
        account_id, snapshot.to_dict() if snapshot.exists else None, default_limit=default_limit, now=now
    )
    transaction.set(ref, fields, merge=True)


class FirestoreUsageStore:
    """UsageStore over `chart_img_accounts_usage/{accountId}` (contract §14.4).

    The window rules are core.usage's; this class only runs them inside transactions.
    Concurrent reservations on one account contend: the whole transaction is retried a few
    times with short jittered waits, then the caller gets a TransientStoreError.
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = "chart_img_accounts_usage",
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        contention_attempts: int = 4,
        max_transaction_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if contention_attempts < 1:
            raise ValueError("contention_attempts must be >= 1")
        self._client = client
        self._collection = client.collection(collection)
        self._timeout = rpc_timeout
        self._retry = bounded_retry(rpc_timeout)
        self._max_attempts = max_transaction_attempts
        self._retrying = Retrying(
            retry=retry_if_exception(is_contention),
            stop=stop_after_attempt(contention_attempts),
            # jittered, so contenders that failed together do not come back together
            wait=wait_random_exponential(multiplier=0.05, max=0.5),
            sleep=sleep,
            reraise=True,
        )

    def read_usage(
        self, account_ids: Sequence[str], *, default_limits: Mapping[str, int], now: datetime
    ) -> list[AccountUsage]:
        unique = list(dict.fromkeys(account_ids))  # BatchGet rejects duplicates
        refs = [self._collection.document(a) for a in unique]
        try:
            snapshots = list(self._client.get_all(refs, retry=self._retry, timeout=self._timeout))
        except Exception as exc:
            transient = _transient_error(exc, "read of chart_img_accounts_usage")
            if transient is not None:
                raise transient from exc
            raise
        docs = {s.id: s.to_dict() for s in snapshots if s.exists}
        return [current_usage(a, docs.get(a), default_limit=default_limits[a], now=now) for a in account_ids]

    def reserve(self, account_id: str, *, default_limit: int, now: datetime) -> Reservation:
        def attempt() -> Reservation:
            reservation: Reservation = _in_transaction(
                self._client,
                self._max_attempts,
                _reserve_in_transaction,
                self._collection.document(account_id),
                account_id,
                default_limit,
                now,
                self._retry,
                self._timeout,
            )
            return reservation

        return self._run(attempt, f"reservation on account {account_id}")

    def mark_exhausted(self, account_id: str, *, default_limit: int, now: datetime) -> None:
        def attempt() -> None:
            _in_transaction(
                self._client,
                self._max_attempts,
                _exhaust_in_transaction,
                self._collection.document(account_id),
                account_id,
                default_limit,
                now,
                self._retry,
                self._timeout,
            )

        self._run(attempt, f"marking account {account_id} exhausted")

    def _run(self, attempt: Callable[[], _T], operation: str) -> _T:
        try:
            # copy(): a fresh controller per call, so concurrent callers share no retry state
            return self._retrying.copy()(attempt)
        except Exception as exc:
            store_error = _as_store_error(exc, operation)
            if store_error is None:
                raise
            raise store_error from exc
