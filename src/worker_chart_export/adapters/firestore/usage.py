"""UsageStore over `chart_img_accounts_usage/{accountId}` (contract §14.4).

The window and pacing rules are core.usage's; this class runs them inside transactions:
one transaction per HTTP attempt both reserves quota and says when the call may be sent.
Concurrent reservations on one account contend: the whole transaction is retried a few
times with short jittered waits, then the caller gets a TransientStoreError.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from google.cloud import firestore
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    RpcOptions,
    TransactionRunner,
    run_transaction,
)
from worker_chart_export.adapters.firestore.errors import is_contention, translated
from worker_chart_export.core.clock import SYSTEM_CLOCK, Clock
from worker_chart_export.core.naming import ACCOUNTS_USAGE_COLLECTION
from worker_chart_export.core.types import Reservation
from worker_chart_export.core.usage import Pacing, exhausted_fields, reserve_one

T = TypeVar("T")


class FirestoreUsageStore:
    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = ACCOUNTS_USAGE_COLLECTION,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        contention_attempts: int = 4,
        max_transaction_attempts: int = DEFAULT_TRANSACTION_ATTEMPTS,
        clock: Clock = SYSTEM_CLOCK,
        run_in_transaction: TransactionRunner = run_transaction,
    ) -> None:
        if contention_attempts < 1:
            raise ValueError("contention_attempts must be >= 1")
        self._client = client
        self._collection = client.collection(collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = max_transaction_attempts
        self._run_in_transaction = run_in_transaction
        self._clock = clock
        self._retrying = Retrying(
            retry=retry_if_exception(is_contention),
            stop=stop_after_attempt(contention_attempts),
            # jittered, so contenders that failed together do not come back together
            wait=wait_random_exponential(multiplier=0.05, max=0.5),
            sleep=clock.sleep,
            reraise=True,
        )

    def reserve(
        self,
        account_id: str,
        *,
        default_limit: int,
        now: datetime,
        pacing: Pacing | None = None,
        max_wait: float = float("inf"),
    ) -> Reservation:
        ref = self._collection.document(account_id)
        began = self._clock.monotonic()

        def reserve(transaction: firestore.Transaction) -> Reservation:
            snapshot = self._rpc.get(ref, transaction)
            doc = snapshot.to_dict() if snapshot.exists else None
            # The pacing needs the moment the document was read, not the moment we asked:
            # a read that waited on another instance's lock, or a retried attempt, would
            # otherwise take a slot in the past and let the key burst past its rate.
            moment = now + timedelta(seconds=self._clock.monotonic() - began)
            update, reservation = reserve_one(
                account_id, doc, default_limit=default_limit, now=moment, pacing=pacing, max_wait=max_wait
            )
            if update is not None:
                transaction.set(ref, update, merge=True)
            return reservation

        return self._with_retries(reserve, f"reservation on account {account_id}")

    def mark_exhausted(self, account_id: str, *, default_limit: int, now: datetime) -> None:
        ref = self._collection.document(account_id)

        def exhaust(transaction: firestore.Transaction) -> None:
            snapshot = self._rpc.get(ref, transaction)
            doc = snapshot.to_dict() if snapshot.exists else None
            transaction.set(ref, exhausted_fields(doc, default_limit=default_limit, now=now), merge=True)

        self._with_retries(exhaust, f"marking account {account_id} exhausted")

    def _with_retries(self, body: Callable[[firestore.Transaction], T], operation: str) -> T:
        def attempt() -> T:
            return self._run_in_transaction(self._client, body, max_attempts=self._max_attempts)

        with translated(operation):
            # copy(): a fresh controller per call, so concurrent callers share no retry state
            return self._retrying.copy()(attempt)
