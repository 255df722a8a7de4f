"""UsageStore over `chart_img_accounts_usage/{accountId}` (contract §14.4).

The window and pacing rules are core.chart_img.usage's; this class applies them atomically. A
reservation is a compare-and-set on one document: compute the new fields from the version
read, then write them with the precondition "the document is still that version" (its
`update_time`; `create` when it did not exist). Firestore commits such a write only if no
other write landed in between, so reservations on one account are serialized across every
instance, as a transaction would serialize them, at fewer round trips and with no lock held:
- the version this store wrote last is remembered, so an account only this instance uses
  costs ONE round trip (the commit) per reservation;
- after another instance wrote, the commit fails its precondition, the document is read
  again and the reservation recomputed: a read and a commit more;
- a cold account: a read and a commit.
Repeated conflicts are retried a few times with short jittered waits, then the caller gets
a TransientStoreError. Each write carries an id of its own (`lastWriteId`): one whose answer
was lost is found landed by the read that follows (api_core's retry of it failing its
precondition on our own version, or an outage's error), and counts once. A unit given back
(`refund`: the call never left) is the same kind of compare-and-set. A step's first wave
of reservations in one BatchWrite: usage_waves.py; what CHART-IMG said of a key (exhausted,
disabled, set aside, serving again), persisted in rare transactions: usage_verdicts.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from tenacity import Retrying, retry_if_exception

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    RpcOptions,
    TransactionRunner,
    Version,
    run_transaction,
    version_of,
)
from worker_chart_export.adapters.firestore.exception_map import is_contention, translated
from worker_chart_export.adapters.firestore.usage_verdicts import UsageVerdicts
from worker_chart_export.adapters.firestore.usage_waves import WRITE_ID, UsageWaves, written_by
from worker_chart_export.core.chart_img.usage import (
    Pacing,
    Refund,
    ReservationTime,
    refund_one,
    reserve_one,
)
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.naming import ACCOUNTS_USAGE_COLLECTION
from worker_chart_export.core.retry import USAGE_COMMITS, Backoff
from worker_chart_export.core.types import Reservation

T = TypeVar("T")


_ABSENT = Version(None, None)
MAX_COMMIT_ESTIMATE = 0.25  # seconds


class FirestoreUsageStore(UsageWaves, UsageVerdicts):
    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = ACCOUNTS_USAGE_COLLECTION,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        contention: Backoff = USAGE_COMMITS,
        clock: Clock,
        run_in_transaction: TransactionRunner = run_transaction,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._rpc = RpcOptions(rpc_timeout)
        self._max_attempts = DEFAULT_TRANSACTION_ATTEMPTS
        self._run_in_transaction = run_in_transaction
        self._clock = clock
        self._versions: dict[str, Version] = {}  # what this store last wrote, per account
        self._versions_lock = threading.Lock()
        self._absent_unless_seen = False  # after prime(): an unknown account has no document
        self._forgotten: set[str] = set()
        self._commit_seconds = 0.0  # how long a commit takes, as recently seen
        self._retrying = Retrying(
            retry=retry_if_exception(is_contention),
            stop=contention.stop(),
            # jittered, so contenders that failed together do not come back together
            wait=contention.wait(),
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
        began = self._clock.monotonic()

        def plan(doc: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, Reservation]:
            # The slot is counted from a moment the request can really leave: not before the
            # time this store has spent (a retried attempt or a slow read would take a slot
            # in the past), and not before the commit returns. A burst slot counted before a
            # commit that then took 150 ms is a send 150 ms late, and CHART-IMG's bucket,
            # which refills from the arrivals it sees, answers the next paced call with 429.
            spent = self._clock.monotonic() - began
            at = ReservationTime(now + timedelta(seconds=spent), max_wait, self._commit_estimate())
            return reserve_one(account_id, doc, default_limit=default_limit, pacing=pacing, at=at)

        return self._apply(account_id, plan, f"reservation on account {account_id}")

    def refund(self, account_id: str, *, day: str) -> Refund:
        """One unit reserved in the window `day` given back (core.chart_img.usage.refund_one), as one
        compare-and-set on the account's document like a reservation; `tat` untouched."""

        def plan(doc: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, Refund]:
            return refund_one(account_id, doc, day=day)

        return self._apply(account_id, plan, f"refund on account {account_id}")

    def _apply(
        self,
        account_id: str,
        plan: Callable[[Mapping[str, Any] | None], tuple[dict[str, Any] | None, T]],
        operation: str,
    ) -> T:
        """`plan` on the account's document as last known (read when unknown), its fields
        written as a compare-and-set on that version; read and planned again after another
        instance wrote it meanwhile, a few times."""
        ref = self._collection.document(account_id)
        write_id = uuid.uuid4().hex
        in_flight: list[T] = []  # what the write carrying `write_id` planned, once sent

        def attempt() -> T:
            known = self._known_version(account_id)
            if known is None:
                known = version_of(self._rpc.get(ref))
                if in_flight and written_by(known.doc, write_id):
                    # our write landed though its answer was lost (api_core sent it again and
                    # met our own version): it counts once
                    self._remember(account_id, known, {}, known.update_time)
                    return in_flight[-1]
            update, result = plan(known.doc)
            if update is None:
                return result
            in_flight[:] = [result]
            try:
                self._compare_and_set(ref, account_id, known, {**update, WRITE_ID: write_id})
            except api_exceptions.Aborted:
                raise  # changed meanwhile, or our own write: the next attempt reads and sees
            except Exception:
                if not self._landed(ref, account_id, write_id):
                    raise
            return result

        with translated(operation):
            return self._retrying.copy()(attempt)

    def _landed(self, ref: firestore.DocumentReference, account_id: str, write_id: str) -> bool:
        """After a write whose answer never came: one read says whether it landed (then it is
        remembered, and counts once); False when it did not, or the read fails too."""
        try:
            known = version_of(self._rpc.get(ref))
        except Exception:
            return False
        if not written_by(known.doc, write_id):
            return False
        self._remember(account_id, known, {}, known.update_time)
        return True

    def prime(self) -> int:
        """Read every usage document once (one query) and remember their versions, so the
        first reservation of each account costs a commit, not a read and a commit. For an
        instance's start-up warm-up; returns how many documents it read."""
        started = self._clock.monotonic()
        snapshots = self._every_document()
        took = self._clock.monotonic() - started
        with self._versions_lock:
            # the first commits (often a burst on an idle key) need an estimate too: a
            # round trip just measured is the best there is, bounded as the average is
            self._commit_seconds = max(self._commit_seconds, min(MAX_COMMIT_ESTIMATE, took))
            for snapshot in snapshots:
                self._versions.setdefault(snapshot.id, Version(snapshot.to_dict(), snapshot.update_time))
            # an account without a document is created by its first reservation (create()
            # fails if another instance created it meanwhile, and the store reads it then)
            self._absent_unless_seen = True
        return len(snapshots)

    def read_all(self) -> dict[str, Mapping[str, Any]]:
        """Every usage document, by account id (one query; nothing remembered): for
        `worker-chart-export accounts`."""
        return {snapshot.id: snapshot.to_dict() or {} for snapshot in self._every_document()}

    def _every_document(self) -> list[firestore.DocumentSnapshot[firestore.DocumentReference]]:
        with translated("read of chart_img_accounts_usage", contention=False):
            return list(self._collection.stream(retry=self._rpc.retry, timeout=self._rpc.timeout))

    def read(self, account_ids: Sequence[str]) -> dict[str, Mapping[str, Any] | None]:
        """The documents now, in one BatchGet, remembered as the versions to write on (so a
        BatchWrite after it finds them current, unless another instance wrote meanwhile)."""
        refs = [self._collection.document(a) for a in account_ids]
        with translated("read of chart_img_accounts_usage", contention=False):
            snapshots = list(self._client.get_all(refs, retry=self._rpc.retry, timeout=self._rpc.timeout))
        docs: dict[str, Mapping[str, Any] | None] = {}
        with self._versions_lock:
            # (a reservation of ours committed after this read makes the version remembered
            # here stale: its next write fails its precondition and reads again, as ever)
            for snapshot in snapshots:
                doc = snapshot.to_dict() if snapshot.exists else None
                docs[snapshot.id] = doc
                self._versions[snapshot.id] = Version(doc, snapshot.update_time if doc is not None else None)
                self._forgotten.discard(snapshot.id)
        return docs

    def _known_version(self, account_id: str) -> Version | None:
        with self._versions_lock:
            known = self._versions.get(account_id)
            if known is None and self._absent_unless_seen and account_id not in self._forgotten:
                return _ABSENT
            return known

    def _compare_and_set(
        self, ref: firestore.DocumentReference, account_id: str, known: Version, update: dict[str, Any]
    ) -> None:
        """Write `update` only if the document is still `known`; Aborted (contention) if not."""
        started = self._clock.monotonic()
        try:
            if known.doc is None:
                result = ref.create(update, retry=self._rpc.retry, timeout=self._rpc.timeout)
            else:
                option = self._client.write_option(last_update_time=known.update_time)
                result = ref.update(update, option=option, retry=self._rpc.retry, timeout=self._rpc.timeout)
        except (
            api_exceptions.FailedPrecondition,
            api_exceptions.AlreadyExists,
            api_exceptions.NotFound,
        ) as exc:
            self._forget(account_id)
            changed = f"usage of account {account_id} changed meanwhile"
            raise api_exceptions.Aborted(changed) from exc  # type: ignore[no-untyped-call]
        except Exception:
            self._forget(account_id)  # the write may or may not have landed: read it next time
            raise
        self._remember(account_id, known, update, result.update_time)
        self._note_commit(self._clock.monotonic() - started)

    def _remember(self, account_id: str, known: Version, update: dict[str, Any], update_time: Any) -> None:
        """The version just written."""
        with self._versions_lock:
            self._versions[account_id] = Version({**(known.doc or {}), **update}, update_time)

    def _note_commit(self, took: float) -> None:
        with self._versions_lock:
            # a moving average of successful commits, bounded: one slow commit (a cold
            # channel) must not hold every later send back for long
            self._commit_seconds = min(MAX_COMMIT_ESTIMATE, 0.8 * self._commit_seconds + 0.2 * took)

    def _commit_estimate(self) -> float:
        with self._versions_lock:
            return self._commit_seconds

    def _forget(self, account_id: str) -> None:
        with self._versions_lock:
            self._versions.pop(account_id, None)
            self._forgotten.add(account_id)
