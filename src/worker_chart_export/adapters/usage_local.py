"""run-local's UsageStore (contract §14.4): one JSON file, the same operations as the tests'
in-memory store (worker_chart_export.testing.InMemoryUsageStore) plus its load and save.

Both apply the same pure window rules as the Firestore store (`core/chart_img/usage.py`) inside a lock,
so a reservation is read-check-increment with no lost updates under concurrency. The file
is `{accountId: {"usageToday": int, "windowStart": "YYYY-MM-DDT00:00:00Z", "dailyLimit"?: int, ...}}`
(the fields core/chart_img/usage.py describes).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from worker_chart_export.core.chart_img.set_aside import cooling_fields, serving_again_fields
from worker_chart_export.core.chart_img.usage import (
    QUOTA_REFUSED,
    Pacing,
    Refund,
    ReservationRequest,
    ReservationTime,
    disabled_fields,
    exhausted_fields,
    refund_one,
    reserve_many,
    reserve_one,
)
from worker_chart_export.core.types import Reservation

try:  # POSIX: also serialise separate processes sharing one file (two run-local shells)
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

Docs = dict[str, dict[str, Any]]


class DocsUsageStore:
    """The UsageStore operations over a {accountId: doc} mapping; subclasses supply storage."""

    def _transaction(self) -> contextlib.AbstractContextManager[Docs]:
        raise NotImplementedError

    def reserve(
        self,
        account_id: str,
        *,
        default_limit: int,
        now: datetime,
        pacing: Pacing | None = None,
        max_wait: float = float("inf"),
    ) -> Reservation:
        with self._transaction() as docs:
            update, reservation = reserve_one(
                account_id,
                docs.get(account_id),
                default_limit=default_limit,
                pacing=pacing,
                at=ReservationTime(now, max_wait),
            )
            if update is not None:
                docs.setdefault(account_id, {}).update(update)
            return reservation

    def reserve_many(
        self, requests: Sequence[ReservationRequest], *, now: datetime, max_wait: float
    ) -> dict[str, list[Reservation]]:
        answer: dict[str, list[Reservation]] = {}
        with self._transaction() as docs:
            for request in requests:
                update, answer[request.account_id] = reserve_many(
                    request, docs.get(request.account_id), ReservationTime(now, max_wait)
                )
                if update is not None:
                    docs.setdefault(request.account_id, {}).update(update)
        return answer

    def refund(self, account_id: str, *, day: str) -> Refund:
        with self._transaction() as docs:
            update, refund = refund_one(account_id, docs.get(account_id), day=day)
            if update is not None:
                docs[account_id].update(update)
            return refund

    def read(self, account_ids: Sequence[str]) -> dict[str, Mapping[str, Any] | None]:
        with self._transaction() as docs:
            return {a: copy.deepcopy(docs[a]) if a in docs else None for a in account_ids}

    def mark_exhausted(self, account_id: str, *, now: datetime, reason: str = QUOTA_REFUSED) -> None:
        with self._transaction() as docs:
            fields = exhausted_fields(docs.get(account_id), now=now, reason=reason)
            docs.setdefault(account_id, {}).update(fields)

    def mark_disabled(self, account_id: str, *, reason: str, now: datetime) -> None:
        with self._transaction() as docs:
            docs.setdefault(account_id, {}).update(
                disabled_fields(docs.get(account_id), reason=reason, now=now)
            )

    def mark_cooling(self, account_id: str, *, reason: str, now: datetime) -> None:
        with self._transaction() as docs:
            docs.setdefault(account_id, {}).update(cooling_fields(reason=reason, now=now))

    def mark_serving(self, account_id: str, *, now: datetime) -> None:
        with self._transaction() as docs:
            fields = serving_again_fields(docs.get(account_id))
            if fields:
                docs[account_id].update(fields)


class FileUsageStore(DocsUsageStore):
    """One JSON file, rewritten by atomic replace; a missing file means no usage yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Docs]:
        with self._lock, self._file_lock():
            docs = self._load()
            before = copy.deepcopy(docs)
            yield docs
            if docs != before:
                self._store(docs)

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        if fcntl is None:  # pragma: no cover
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _load(self) -> Docs:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        data = json.loads(raw) if raw.strip() else {}
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: expected a JSON object of accountId -> usage")
        return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}

    def _store(self, docs: Docs) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(docs, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def snapshot(self) -> Docs:
        with self._transaction() as docs:
            return copy.deepcopy(docs)

    def read_all(self) -> dict[str, Mapping[str, Any]]:
        """Every account's document; a file not written yet means no usage (and reading it
        creates nothing)."""
        return dict(self.snapshot()) if self.path.exists() else {}
