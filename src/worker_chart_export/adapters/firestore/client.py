"""The Firestore client, bounded RPC retries, the transaction runner and the batch
committer, documents as plain values.

Bounds: every RPC we issue carries our own retry deadline and timeout (`rpc_timeout`),
transactions' BeginTransaction, Commit and Rollback included (BoundedTransaction): the
client's defaults retry UNAVAILABLE for up to 60 s, which a step budget cannot afford.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry, if_exception_type
from google.cloud import firestore

from worker_chart_export.core.retry import (
    FIRESTORE_RPC,
    FIRESTORE_RPC_DEADLINE_SECONDS,
    FIRESTORE_WRITE_ROUNDS,
    Backoff,
)

EMULATOR_DEFAULT_PROJECT = "demo-worker-chart-export"
# the policies' (core/retry.py), under the names this package's bounds are written with
DEFAULT_RPC_TIMEOUT_SECONDS = FIRESTORE_RPC_DEADLINE_SECONDS
DEFAULT_TRANSACTION_ATTEMPTS = FIRESTORE_WRITE_ROUNDS

T = TypeVar("T")
TransactionBody = Callable[[firestore.Transaction], T]


def make_firestore_client(project: str | None, *, emulator_host: str | None = None) -> firestore.Client:
    """A Firestore client for `project`.

    The library itself points at the emulator and goes anonymous when FIRESTORE_EMULATOR_HOST
    is set. `emulator_host` only decides the default project: with an emulator and no
    project, `demo-worker-chart-export`; in production, None lets the library infer the
    project from the credentials (Cloud Run does not set GOOGLE_CLOUD_PROJECT), and a
    made-up project there would only produce PermissionDenied.
    """
    if project is None and emulator_host:
        project = EMULATOR_DEFAULT_PROJECT
    return firestore.Client(project=project)


def bounded_retry(rpc_timeout: float, policy: Backoff = FIRESTORE_RPC) -> Retry:
    # The client's defaults retry UNAVAILABLE for 60-300 s; a step budget cannot afford that.
    return Retry(
        predicate=if_exception_type(
            api_exceptions.ServiceUnavailable,
            api_exceptions.DeadlineExceeded,
            api_exceptions.InternalServerError,
            api_exceptions.ResourceExhausted,
        ),
        initial=policy.base,
        maximum=policy.cap,
        multiplier=policy.factor,
        timeout=rpc_timeout,
    )


class TransactionRunner(Protocol):
    """Runs `body(transaction)` to commit, re-running it on contention. The seam tests use
    to inject contention or a lost commit answer."""

    def __call__(
        self, client: firestore.Client, body: TransactionBody[T], *, max_attempts: int, rpc: RpcOptions
    ) -> T: ...


def run_transaction(
    client: firestore.Client, body: TransactionBody[T], *, max_attempts: int, rpc: RpcOptions
) -> T:
    # A wrapper per call on purpose: firestore.transactional() keeps the ids of the running
    # transaction on the wrapper object, so one shared by threads would mix them up.
    transaction = BoundedTransaction(client, rpc, max_attempts=max_attempts)
    result: T = firestore.transactional(body)(transaction)
    return result


class BoundedTransaction(firestore.Transaction):
    """A transaction whose BeginTransaction, Commit and Rollback carry `rpc`'s timeout (and,
    but for Commit, its bounded retry). The library sends them with the client's defaults
    (UNAVAILABLE retried for 60 s) and takes no options for them, so these are its own three
    methods (google-cloud-firestore 2.x, pinned in the lock) with the bounds added;
    tests/unit/test_private_apis.py fails if an upgrade changes them, naming which. Commit
    is not retried: its answer can be lost after it landed, which the callers settle by
    reading (the claim's confirming read).
    """

    def __init__(self, client: firestore.Client, rpc: RpcOptions, *, max_attempts: int) -> None:
        super().__init__(client, max_attempts=max_attempts)
        self._bounds = rpc

    def _begin(self, retry_id: bytes | None = None) -> None:
        if self.in_progress:
            raise ValueError(f"transaction {self._id!r} has already begun")
        response = self._client._firestore_api.begin_transaction(
            request={"database": self._client._database_string, "options": self._options_protobuf(retry_id)},
            metadata=self._client._rpc_metadata,
            retry=self._bounds.retry,
            timeout=self._bounds.timeout,
        )
        self._id = response.transaction

    def _rollback(self) -> None:
        if not self.in_progress:
            raise ValueError("no transaction in progress to roll back")
        try:
            self._client._firestore_api.rollback(
                request={"database": self._client._database_string, "transaction": self._id},
                metadata=self._client._rpc_metadata,
                retry=self._bounds.retry,
                timeout=self._bounds.timeout,
            )
        finally:
            self._clean_up()

    def _commit(self) -> list[Any]:
        if not self.in_progress:
            raise ValueError("no transaction in progress to commit")
        response = self._client._firestore_api.commit(
            request={
                "database": self._client._database_string,
                "writes": self._write_pbs,
                "transaction": self._id,
            },
            metadata=self._client._rpc_metadata,
            retry=None,
            timeout=self._bounds.timeout,
        )
        self._clean_up()
        self.write_results = list(response.write_results)
        self.commit_time = response.commit_time
        return self.write_results


@dataclass(frozen=True)
class Version:
    """One version of a document: its fields (None: absent) and the update time Firestore
    gave it, which a write made on the condition "still this version" names."""

    doc: Mapping[str, Any] | None
    update_time: Any  # a protobuf Timestamp or datetime, as the client returns and takes it


def version_of(snapshot: Any) -> Version:
    """A snapshot as a Version of plain values (doc and update_time None when absent)."""
    return Version(snapshot_dict(snapshot), snapshot.update_time if snapshot.exists else None)


class BatchCommitter(Protocol):
    """Commits `batch` (all its writes or none) with the bounded retry and timeout of `rpc`,
    returning the write results. The seam tests use to inject an outage, a lost answer or a
    competing write."""

    def __call__(self, batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]: ...


def commit_batch(batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
    return list(batch.commit(retry=rpc.retry, timeout=rpc.timeout))


class RpcOptions:
    """The retry and timeout every read and batch commit of ours carries."""

    def __init__(self, rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS) -> None:
        self.timeout = rpc_timeout
        self.retry = bounded_retry(rpc_timeout)

    def get(self, ref: firestore.DocumentReference, transaction: Any = None) -> Any:
        return ref.get(transaction=transaction, retry=self.retry, timeout=self.timeout)

    def get_all(self, client: firestore.Client, refs: list[firestore.DocumentReference]) -> list[Any]:
        return list(client.get_all(refs, retry=self.retry, timeout=self.timeout))


def plain(value: Any) -> Any:
    """Firestore values as JSON-like values: timestamps become RFC 3339 UTC strings."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        moment = value.astimezone(UTC)
        spec = "milliseconds" if moment.microsecond % 1000 == 0 else "microseconds"
        return moment.isoformat(timespec=spec).replace("+00:00", "Z")
    if isinstance(value, firestore.DocumentReference):
        return value.path
    return value


def snapshot_dict(snapshot: Any) -> dict[str, Any] | None:
    """A snapshot's document as plain values, None when it does not exist."""
    return plain(snapshot.to_dict()) if snapshot.exists else None
