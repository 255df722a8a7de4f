"""Which CHART-IMG account the next HTTP attempt uses (worker contract §14.4).

Before each attempt: reserve one unit of an account's daily quota in the UsageStore (least
used first, ties by id), then take a token from that account's bucket so the provider never
sees more than its rate. Time comes from the injected Clock.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import SecretStr

from worker_chart_export.adapters.accounts_config import AccountConfig
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.pacing import TokenBucket
from worker_chart_export.core.types import Reservation
from worker_chart_export.core.usage import least_used_first
from worker_chart_export.logs import get_logger
from worker_chart_export.ports import UsageStore


@dataclass(frozen=True)
class Lease:
    """Permission for one HTTP attempt: a reserved quota unit and a rate token, both taken."""

    account_id: str
    api_key: SecretStr
    reservation: Reservation
    paced_seconds: float  # how long we waited for the rate token


class Refusal(StrEnum):
    EXHAUSTED = "EXHAUSTED"  # every account is at its daily limit (no call may be made)
    NO_TIME = "NO_TIME"  # no rate token frees up within the time left


@dataclass(frozen=True)
class NoAccount:
    reason: Refusal
    exhausted_accounts: tuple[str, ...]


def next_utc_midnight(now: datetime) -> datetime:
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


class AccountLimiter:
    """Chooses, reserves and paces accounts. Thread-safe; one per process, shared by steps."""

    # Pace a little under the plan's rate: the provider counts arrivals, we count sends, and
    # scheduling jitter between the two must not turn into a 429 that burns the account.
    PACING_HEADROOM = 0.9

    def __init__(
        self,
        accounts: Sequence[AccountConfig],
        store: UsageStore,
        *,
        default_limit: int,
        default_rate: float,
        default_burst: int,
        clock: Clock,
        exhausted_ttl: float = 60.0,
        pacing_headroom: float = PACING_HEADROOM,
    ) -> None:
        if not accounts:
            raise ValueError("AccountLimiter needs at least one account")
        self._accounts = {a.id: a for a in accounts}
        self._store = store
        self._limits = {a.id: a.daily_limit or default_limit for a in accounts}
        self._buckets = {
            a.id: TokenBucket(
                (a.rate_per_second or default_rate) * pacing_headroom,
                a.burst or default_burst,
                clock=clock,
            )
            for a in accounts
        }
        self._clock = clock
        self._ttl = timedelta(seconds=exhausted_ttl)
        self._lock = threading.Lock()
        self._reserve_locks = {a.id: threading.Lock() for a in accounts}
        self._in_flight = {a.id: 0 for a in accounts}  # picked, reservation not yet returned
        self._exhausted_until: dict[str, datetime] = {}

    @property
    def account_ids(self) -> tuple[str, ...]:
        return tuple(self._accounts)

    def acquire(self, *, tried: Collection[str] = (), max_wait: float) -> Lease | NoAccount:
        """Reserve quota on the best account and wait for its rate token (at most max_wait).

        Order: not yet tried for this request, then least used, then id; among those, one
        with a token free now wins. "Used" is the store's usageToday plus this process's
        reservations still in flight, so concurrent requests that read the same usage still
        spread over the accounts instead of all queueing on the first one.
        """
        now = self._clock.now()
        live = [a for a in self._accounts if not self._cached_exhausted(a, now)]
        if not live:
            return NoAccount(Refusal.EXHAUSTED, self.exhausted_accounts())
        usages = self._store.read_usage(live, default_limits=self._limits, now=now)
        for usage in usages:
            if usage.exhausted:
                self._cache_exhausted(usage.account_id, now, until_midnight=False)
        open_usages = {u.account_id: u.usage_today for u in least_used_first(usages)}
        while open_usages:
            with self._lock:  # rank and take a token atomically: the next caller sees our pick
                ranked = sorted(
                    open_usages,
                    key=lambda a: (a in tried, open_usages[a] + self._in_flight[a], a),
                )
                picked = self._take_token(ranked, max_wait)
                if picked is None:
                    return NoAccount(Refusal.NO_TIME, self._exhausted_now(now))
                account_id, send_at = picked
                self._in_flight[account_id] += 1
            try:
                # One reservation per account at a time in this process: concurrent
                # transactions on one usage document only contend (Firestore aborts them).
                with self._reserve_locks[account_id]:
                    reservation = self._store.reserve(
                        account_id, default_limit=self._limits[account_id], now=now
                    )
            finally:
                with self._lock:
                    self._in_flight[account_id] -= 1
            if reservation.reserved:
                wait = max(0.0, send_at - self._clock.monotonic())
                if wait > 0:
                    self._clock.sleep(wait)
                key = self._accounts[account_id].api_key
                return Lease(account_id, key, reservation, wait)
            # someone else used it up since we read: the token is simply not used
            self._cache_exhausted(account_id, now, until_midnight=False)
            del open_usages[account_id]
        return NoAccount(Refusal.EXHAUSTED, self.exhausted_accounts())

    def _take_token(self, candidates: list[str], max_wait: float) -> tuple[str, float] | None:
        """(account, monotonic time it may send at): a free token first, else the soonest one."""
        for account_id in candidates:
            if self._buckets[account_id].try_acquire():
                return account_id, self._clock.monotonic()
        soonest = min(candidates, key=lambda a: self._buckets[a].wait_time())
        wait = self._buckets[soonest].reserve(max(0.0, max_wait))
        return None if wait is None else (soonest, self._clock.monotonic() + wait)

    def mark_exhausted(self, account_id: str) -> None:
        """After a 429 / "Limit Exceeded": out until the next UTC midnight (store + cache)."""
        now = self._clock.now()
        self._cache_exhausted(account_id, now, until_midnight=True)
        try:
            self._store.mark_exhausted(account_id, default_limit=self._limits[account_id], now=now)
        except Exception as exc:  # best effort (§14.4): this process already stays off it
            get_logger().warning(
                "chart-img account exhaustion not persisted",
                accountId=account_id,
                errorKind=type(exc).__name__,
            )

    def exhausted_accounts(self) -> tuple[str, ...]:
        now = self._clock.now()
        with self._lock:
            return self._exhausted_now(now)

    def _exhausted_now(self, now: datetime) -> tuple[str, ...]:
        return tuple(sorted(a for a, until in self._exhausted_until.items() if until > now))

    def _cached_exhausted(self, account_id: str, now: datetime) -> bool:
        with self._lock:
            until = self._exhausted_until.get(account_id)
            return until is not None and until > now

    def _cache_exhausted(self, account_id: str, now: datetime, *, until_midnight: bool) -> None:
        midnight = next_utc_midnight(now)
        until = midnight if until_midnight else min(now + self._ttl, midnight)
        with self._lock:
            self._exhausted_until[account_id] = max(until, self._exhausted_until.get(account_id, until))
