"""What CHART-IMG said of a key, persisted in its usage document for every instance and for
`worker-chart-export accounts` (exhausted, disabled, set aside, serving again): rare writes,
each a transaction; the store reads the document before its next reservation. A base of
FirestoreUsageStore, which supplies the client, the collection and the retries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from google.cloud import firestore
from tenacity import Retrying

from worker_chart_export.adapters.firestore.client import RpcOptions, TransactionRunner
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.core.chart_img.set_aside import cooling_fields, serving_again_fields
from worker_chart_export.core.chart_img.usage import QUOTA_REFUSED, disabled_fields, exhausted_fields

T = TypeVar("T")


class UsageVerdicts:
    """`_client`, `_collection`, `_rpc`, `_max_attempts`, `_run_in_transaction`, `_retrying`
    and `_forget` are FirestoreUsageStore's."""

    _client: firestore.Client
    _collection: firestore.CollectionReference
    _rpc: RpcOptions
    _max_attempts: int
    _run_in_transaction: TransactionRunner
    _retrying: Retrying

    def _forget(self, account_id: str) -> None:
        raise NotImplementedError

    def mark_exhausted(self, account_id: str, *, now: datetime, reason: str = QUOTA_REFUSED) -> None:
        def fields(doc: dict[str, Any] | None) -> dict[str, Any]:
            return exhausted_fields(doc, now=now, reason=reason)

        self._merge(account_id, fields, f"marking account {account_id} exhausted")

    def mark_disabled(self, account_id: str, *, reason: str, now: datetime) -> None:
        def fields(doc: dict[str, Any] | None) -> dict[str, Any]:
            return disabled_fields(doc, reason=reason, now=now)

        self._merge(account_id, fields, f"disabling account {account_id}")

    def mark_cooling(self, account_id: str, *, reason: str, now: datetime) -> None:
        def fields(doc: dict[str, Any] | None) -> dict[str, Any]:
            return cooling_fields(reason=reason, now=now)

        self._merge(account_id, fields, f"setting account {account_id} aside")

    def mark_serving(self, account_id: str, *, now: datetime) -> None:
        self._merge(account_id, serving_again_fields, f"account {account_id} serving again")

    def _merge(
        self, account_id: str, fields: Callable[[dict[str, Any] | None], dict[str, Any]], operation: str
    ) -> None:
        """`fields(document)` merged into the document, in a transaction (rare: after CHART-IMG
        refused the quota or the key); this store reads the document before its next write."""
        ref = self._collection.document(account_id)

        def merge(transaction: firestore.Transaction) -> None:
            snapshot = self._rpc.get(ref, transaction)
            doc = snapshot.to_dict() if snapshot.exists else None
            transaction.set(ref, fields(doc), merge=True)

        self._forget(account_id)
        self._with_retries(merge, operation)

    def _with_retries(self, body: Callable[[firestore.Transaction], T], operation: str) -> T:
        def attempt() -> T:
            return self._run_in_transaction(
                self._client, body, max_attempts=self._max_attempts, rpc=self._rpc
            )

        with translated(operation):
            # copy(): a fresh controller per call, so concurrent callers share no retry state
            return self._retrying.copy()(attempt)
