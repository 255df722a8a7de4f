"""A step's first wave of reservations (AccountLimiter.acquire_many) in ONE BatchWrite: each
account's compare-and-set keeps its own precondition and gets its own status, so it is the
same reservations at one round trip instead of one per account. An account whose version is
not known, or whose write fails its precondition, is left out of the answer: its calls then
reserve one at a time. Not retried (the fallback is the retry); a wave whose answer never
came is confirmed by one read of its accounts (its write id), so what landed counts once. A
base of FirestoreUsageStore, which supplies the versions it remembers."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch

from worker_chart_export.adapters.firestore.client import RpcOptions, Version
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.core.chart_img.usage import ReservationRequest, ReservationTime, reserve_many
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import Reservation

# Every reservation and refund carries an id of its own: a write whose answer was lost (the
# commit landed, the reply did not come) is recognised by it when the document is read
# again, and counts once, where a second plan would have counted its unit twice.
WRITE_ID = "lastWriteId"


def written_by(doc: Mapping[str, Any] | None, write_id: str) -> bool:
    return doc is not None and doc.get(WRITE_ID) == write_id


@dataclass(frozen=True)
class _PlannedWrite:
    account_id: str
    known: Version
    update: dict[str, Any]
    reservations: list[Reservation]


class UsageWaves:
    """The store's own parts it uses: FirestoreUsageStore's."""

    _client: firestore.Client
    _collection: firestore.CollectionReference
    _rpc: RpcOptions
    _clock: Clock

    def _known_version(self, account_id: str) -> Version | None:
        raise NotImplementedError

    def _remember(self, account_id: str, known: Version, update: dict[str, Any], update_time: Any) -> None:
        raise NotImplementedError

    def _forget(self, account_id: str) -> None:
        raise NotImplementedError

    def _note_commit(self, took: float) -> None:
        raise NotImplementedError

    def _commit_estimate(self) -> float:
        raise NotImplementedError

    def read(self, account_ids: Sequence[str]) -> dict[str, Mapping[str, Any] | None]:
        raise NotImplementedError

    def reserve_many(
        self, requests: Sequence[ReservationRequest], *, now: datetime, max_wait: float
    ) -> dict[str, list[Reservation]]:
        answer: dict[str, list[Reservation]] = {}
        planned: list[_PlannedWrite] = []
        batch = BulkWriteBatch(self._client)
        at = ReservationTime(now, max_wait, self._commit_estimate())
        write_id = uuid.uuid4().hex  # the wave's: a write of it found landed counts once
        for request in requests:
            known = self._known_version(request.account_id)
            if known is None:
                continue  # a read first: the one-at-a-time path does it
            update, reservations = reserve_many(request, known.doc, at)
            if update is None:
                answer[request.account_id] = reservations  # refused on what we know: no write
                continue
            update = {**update, WRITE_ID: write_id}
            ref = self._collection.document(request.account_id)
            if known.doc is None:
                batch.create(ref, update)
            else:
                option = self._client.write_option(last_update_time=known.update_time)
                batch.update(ref, update, option=option)
            planned.append(_PlannedWrite(request.account_id, known, update, reservations))
        if planned:
            self._commit_batch(batch, planned, answer)
        return answer

    def _commit_batch(
        self, batch: BulkWriteBatch, planned: list[_PlannedWrite], answer: dict[str, list[Reservation]]
    ) -> None:
        started = self._clock.monotonic()
        try:
            with translated(f"reservations on accounts {', '.join(p.account_id for p in planned)}"):
                response = batch.commit(retry=None, timeout=self._rpc.timeout)
        except Exception:
            for write in planned:
                self._forget(write.account_id)  # landed or not: read them next time
            if not self._confirm_batch(planned, answer):
                raise
            return
        self._note_commit(self._clock.monotonic() - started)  # one round trip, counted once
        for write, result, status in zip(planned, response.write_results, response.status, strict=True):
            if status.code != 0:  # changed meanwhile (or refused): nothing reserved here
                self._forget(write.account_id)
                continue
            self._remember(write.account_id, write.known, write.update, result.update_time)
            answer[write.account_id] = write.reservations

    def _confirm_batch(self, planned: list[_PlannedWrite], answer: dict[str, list[Reservation]]) -> bool:
        """A wave whose answer never came: one read of its accounts says which of its writes
        landed (their reservations are made, and count once; the others are not). False when
        that read fails too: the caller then knows nothing and reserves call by call."""
        try:
            docs = self.read([write.account_id for write in planned])
        except TransientStoreError:
            return False
        for write in planned:
            if written_by(docs.get(write.account_id), write.update[WRITE_ID]):
                answer[write.account_id] = write.reservations
        return True
