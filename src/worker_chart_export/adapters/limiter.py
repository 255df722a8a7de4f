"""Which CHART-IMG account the next HTTP attempt uses (worker contract §14.4).

One HTTP attempt = one transaction on `chart_img_accounts_usage/{accountId}` that takes a
unit of the day's quota and the account's next send slot (core/usage.py): the pacing is
shared by every instance through that document. This process only keeps a cheap view to
choose well without reading: what the last reservations said (usage, pacing state), which
accounts are exhausted (cached), cooling down after a rate 429, or refused their key. Its
own picks still reserving count as taken slots. Once a reservation shows that another
instance wrote an account meanwhile, the next wave reads every account first (one round
trip), so a fleet's waves do not queue on keys that only look free.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import SecretStr

from worker_chart_export.adapters.accounts_config import AccountConfig
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.errors import TransientStoreError
from worker_chart_export.core.plans import AccountLimits
from worker_chart_export.core.types import Reservation, ReservationRefusal
from worker_chart_export.core.usage import (
    Pacing,
    ReservationRequest,
    daily_limit_of,
    next_utc_midnight,
    tat_of,
    usage_today,
)
from worker_chart_export.logs import get_logger
from worker_chart_export.service.ports import UsageStore

# Pace a little under the plan's rate: the provider counts arrivals, we count sends, and
# instances' clocks and network paths differ by milliseconds.
PACING_HEADROOM = 0.9
# How much later than its slot a request may reach CHART-IMG relative to the one after it:
# measured on a 2-core machine, a burst sent while 96 charts started at once arrived 0.2 s late
# and the next, on time, met a 429 (benchmarks/bench_fleet.py). The burst is banked that much less.
ARRIVAL_JITTER_SECONDS = 0.3
# A rate 429 without Retry-After cools the key down this long; Retry-After is honoured up
# to MAX_COOLDOWN_SECONDS (a longer wait belongs to the quota, not the rate).
MIN_COOLDOWN_SECONDS = 1.0
MAX_COOLDOWN_SECONDS = 30.0


@dataclass(frozen=True)
class PacingMargins:
    """How far under the plan's own limits each account is paced (see the constants)."""

    headroom: float = PACING_HEADROOM
    arrival_jitter: float = ARRIVAL_JITTER_SECONDS

    def pacing(self, limits: AccountLimits) -> Pacing:
        return Pacing(limits.rate_per_second * self.headroom, limits.burst, self.arrival_jitter)


@dataclass(frozen=True)
class Lease:
    """Permission for one HTTP attempt: a reserved quota unit and a send slot, both taken."""

    account_id: str
    api_key: SecretStr
    reservation: Reservation
    paced_seconds: float  # how long we waited for the send slot


class Refusal(StrEnum):
    EXHAUSTED = "EXHAUSTED"  # every usable account is at its daily limit (no call may be made)
    NO_TIME = "NO_TIME"  # no send slot frees up within the time left
    NO_USABLE_KEY = "NO_USABLE_KEY"  # every account's key was refused by CHART-IMG


@dataclass(frozen=True)
class NoAccount:
    reason: Refusal
    exhausted_accounts: tuple[str, ...]


@dataclass
class _AccountView:
    """This process's last knowledge of one account; only used to choose the order."""

    config: AccountConfig
    daily_limit: int
    pacing: Pacing
    usage_today: int = 0
    tat: float | None = None  # the shared pacing state as the last reservation saw it
    in_flight: int = 0  # picked, reservation not yet returned
    exhausted_until: datetime | None = None
    # CHART-IMG itself said the day's quota is gone (not just our count): see still_accepted
    provider_exhausted_until: datetime | None = None
    cool_until: float = 0.0  # monotonic
    disabled: bool = False

    def expected_wait(self, now: float, moment: float) -> float:
        """How long one more request on this account would wait, by what this process
        knows: the pacing state its last reservation saw, advanced by one slot for each
        of its picks still reserving (so concurrent picks spread over the accounts
        instead of queueing on the one that looked free), or the cooldown."""
        tat = self.tat
        for _ in range(self.in_flight):
            tat = self.pacing.next_tat(tat, now)
        return max(self.pacing.send_time(tat, now) - now, self.cool_until - moment)


class AccountLimiter:
    """Chooses, reserves and paces accounts. Thread-safe; one per process, shared by steps."""

    def __init__(
        self,
        accounts: Sequence[AccountConfig],
        store: UsageStore,
        *,
        defaults: AccountLimits,
        clock: Clock,
        exhausted_ttl: float = 60.0,
        margins: PacingMargins | None = None,
    ) -> None:
        if not accounts:
            raise ValueError("AccountLimiter needs at least one account")
        self._views: dict[str, _AccountView] = {}
        for account in accounts:
            limits = account.limits(defaults)
            pacing = (margins or PacingMargins()).pacing(limits)
            self._views[account.id] = _AccountView(account, limits.daily_limit, pacing)
        self._store = store
        self._clock = clock
        self._ttl = timedelta(seconds=exhausted_ttl)
        self._lock = threading.Lock()
        # One reservation per account at a time in this process: concurrent transactions
        # on one usage document would only contend (Firestore aborts and retries them).
        self._reserve_locks = {a.id: threading.Lock() for a in accounts}
        # Set when a reservation shows another instance wrote an account since this process
        # last saw it: the views are behind, so the next wave reads them all first.
        self._behind = False

    @property
    def account_ids(self) -> tuple[str, ...]:
        return tuple(self._views)

    def acquire(self, *, tried: Collection[str] = (), max_wait: float) -> Lease | NoAccount:
        """Reserve quota and a send slot on the best account, then wait for the slot.

        Order: not yet tried for this request, then the soonest expected slot (this
        process's picks still reserving counted as taken slots), then least used (those
        picks counted too), then id. A refused account costs one transaction and the next
        is tried.
        """
        busy, refused = False, set[str]()
        while (account_id := self._pick(tried, refused)) is not None:
            outcome = self._try(account_id, max_wait)
            if isinstance(outcome, Lease):
                return outcome
            refused.add(account_id)
            busy = busy or outcome is ReservationRefusal.BUSY
        return self._no_account(busy)

    def acquire_many(self, count: int, *, max_wait: float) -> list[Lease]:
        """Up to `count` leases in ONE store round trip (a step's first wave of calls),
        soonest slot first. Accounts are picked as acquire() picks them, one after another,
        so the wave spreads; a cooling account is left out. Fewer leases, or none, when
        the store knows too little or refuses: those calls acquire() one by one. A lease's
        slot may still be ahead: `wait_for_slot` before sending. When other instances have
        been reserving on these accounts, one read of them all comes first (`_catch_up`)."""
        self._catch_up()
        picks: list[str] = []
        cooling: set[str] = set()
        while len(picks) < count and (account_id := self._pick((), cooling)) is not None:
            if self._views[account_id].cool_until > self._clock.monotonic():
                cooling.add(account_id)
                self._release_pick(account_id)
                continue
            picks.append(account_id)
        try:
            return self._reserve_wave(Counter(picks), max_wait)
        finally:
            for account_id in picks:
                self._release_pick(account_id)

    def _reserve_wave(self, counts: Counter[str], max_wait: float) -> list[Lease]:
        if not counts:
            return []
        requests = [
            ReservationRequest(a, n, self._views[a].daily_limit, self._views[a].pacing)
            for a, n in sorted(counts.items())
        ]
        leases = []
        with ExitStack() as locks:
            for request in requests:  # sorted: concurrent waves cannot deadlock
                locks.enter_context(self._reserve_locks[request.account_id])
            answer = self._store.reserve_many(requests, now=self._clock.now(), max_wait=max_wait)
            if set(counts) - set(answer):  # left out: changed meanwhile, or not known here
                self._behind = True
            for account_id, reservations in answer.items():
                view = self._views[account_id]
                taken = [Lease(account_id, view.config.api_key, r, 0.0) for r in reservations if r.reserved]
                if reservations:
                    self._learn(view, reservations[-1], units=len(taken))
                leases += taken
        return sorted(leases, key=lambda lease: lease.reservation.send_at or self._clock.now())

    def _catch_up(self) -> None:
        """When another instance has written the accounts since this process saw them, a
        wave picked on the old view would queue on the keys that only look free (the
        fleet benchmark: 22 to 27 calls per key instead of 24). One read of every usable
        account brings the view, and the store's versions, up to date. Best effort."""
        now = self._clock.now()
        with self._lock:
            if not self._behind:
                return
            self._behind = False
            ids = [a for a, v in self._views.items() if self._usable(v, now)]
        try:
            docs = self._store.read(ids)
        except TransientStoreError:
            return  # the wave goes on what is known; its reservations still hold exactly
        with self._lock:
            for account_id, doc in docs.items():
                view = self._views[account_id]
                view.usage_today = usage_today(doc, now)
                fresh = tat_of(doc)
                if fresh is not None and (view.tat is None or fresh > view.tat):
                    view.tat = fresh  # the shared state only moves forward
                if view.usage_today >= daily_limit_of(doc, view.daily_limit):
                    view.exhausted_until = min(now + self._ttl, next_utc_midnight(now))

    def wait_for_slot(self, lease: Lease) -> Lease:
        """Sleeps until the lease's send slot; the lease, saying how long that was."""
        assert lease.reservation.send_at is not None  # a reservation always says when
        wait = (lease.reservation.send_at - self._clock.now()).total_seconds()
        if wait > 0:
            self._clock.sleep(wait)
        return replace(lease, paced_seconds=lease.paced_seconds + max(0.0, wait))

    def _release_pick(self, account_id: str) -> None:
        with self._lock:
            self._views[account_id].in_flight -= 1

    def _pick(self, tried: Collection[str], refused: Collection[str]) -> str | None:
        """The best account not yet refused in this acquire, counted in flight at once so
        the next concurrent caller ranks with this pick in mind."""
        now, moment = self._clock.now(), self._clock.monotonic()
        with self._lock:
            usable = [v for v in self._views.values() if v.config.id not in refused and self._usable(v, now)]
            if not usable:
                return None
            best = min(
                usable,
                key=lambda v: (
                    v.config.id in tried,
                    v.expected_wait(now.timestamp(), moment),
                    v.usage_today + v.in_flight,
                    v.config.id,
                ),
            )
            best.in_flight += 1
            return best.config.id

    def _try(self, account_id: str, max_wait: float) -> Lease | ReservationRefusal:
        view = self._views[account_id]
        try:
            cooling = max(0.0, view.cool_until - self._clock.monotonic())
            # The shared state only moves forward, so the slot this process last saw is a
            # lower bound: when even that is too far, no transaction can do better.
            now = self._clock.now().timestamp()
            if max(cooling, view.pacing.send_time(view.tat, now) - now) > max_wait:
                return ReservationRefusal.BUSY
            with self._reserve_locks[account_id]:
                reservation = self._store.reserve(
                    account_id,
                    default_limit=view.daily_limit,
                    now=self._clock.now(),
                    pacing=view.pacing,
                    max_wait=max_wait - cooling,
                )
                self._learn(view, reservation, units=int(reservation.reserved))
        finally:
            self._release_pick(account_id)
        if not reservation.reserved:
            return reservation.refusal or ReservationRefusal.EXHAUSTED
        assert reservation.send_at is not None  # a reservation always says when
        wait = max(cooling, (reservation.send_at - self._clock.now()).total_seconds())
        if wait > 0:
            self._clock.sleep(wait)
        return Lease(account_id, view.config.api_key, reservation, max(0.0, wait))

    def _learn(self, view: _AccountView, reservation: Reservation, *, units: int) -> None:
        """What a reservation (taking `units` units here) said of its account. Called under
        the account's reserve lock, so this process's own reservations are all counted."""
        now = self._clock.now()
        with self._lock:
            if reservation.usage_today > view.usage_today + units:
                self._behind = True  # someone else reserved on it meanwhile
            view.usage_today = reservation.usage_today
            if reservation.tat is not None:
                view.tat = reservation.tat
            if reservation.refusal is ReservationRefusal.EXHAUSTED:
                view.exhausted_until = min(now + self._ttl, next_utc_midnight(now))

    def _no_account(self, busy: bool) -> NoAccount:
        exhausted = self.exhausted_accounts()
        if busy:
            return NoAccount(Refusal.NO_TIME, exhausted)
        with self._lock:
            all_disabled = all(v.disabled for v in self._views.values())
        return NoAccount(Refusal.NO_USABLE_KEY if all_disabled else Refusal.EXHAUSTED, exhausted)

    # --- what CHART-IMG said about an account ---

    def mark_exhausted(self, account_id: str) -> None:
        """After a quota 429 / "Limit Exceeded": out until the next UTC midnight (store + cache)."""
        view = self._views[account_id]
        now = self._clock.now()
        with self._lock:
            view.exhausted_until = view.provider_exhausted_until = next_utc_midnight(now)
        try:
            self._store.mark_exhausted(account_id, default_limit=view.daily_limit, now=now)
        except Exception as exc:  # best effort (§14.4): this process already stays off it
            get_logger().warning(
                "chart-img account exhaustion not persisted",
                accountId=account_id,
                errorKind=type(exc).__name__,
            )

    def cool_down(self, account_id: str, retry_after: float | None) -> float:
        """After a rate 429: no call on this key for a short, bounded time. Returns it."""
        seconds = min(MAX_COOLDOWN_SECONDS, max(MIN_COOLDOWN_SECONDS, retry_after or 0.0))
        with self._lock:
            view = self._views[account_id]
            view.cool_until = max(view.cool_until, self._clock.monotonic() + seconds)
        return seconds

    def disable(self, account_id: str) -> None:
        """After CHART-IMG refused the key: never used again by this process; one ERROR."""
        with self._lock:
            view = self._views[account_id]
            first = not view.disabled
            view.disabled = True
        if first:
            get_logger().error(
                "chart-img account key refused: account disabled",
                accountId=account_id,
                error={"code": "CHART_API_KEY_REFUSED"},
            )

    def exhausted_accounts(self) -> tuple[str, ...]:
        now = self._clock.now()
        with self._lock:
            return tuple(
                sorted(
                    a
                    for a, v in self._views.items()
                    if v.exhausted_until is not None and v.exhausted_until > now
                )
            )

    def still_accepted(self, account_id: str) -> bool:
        """CHART-IMG has not refused the account since: no quota 429, no rate cooldown, key
        not refused. (That our own count reached the daily limit does not matter here: a
        unit already reserved is within it.)"""
        with self._lock:
            view = self._views[account_id]
            until = view.provider_exhausted_until
            exhausted = until is not None and until > self._clock.now()
            cooling = view.cool_until > self._clock.monotonic()
            return not (view.disabled or exhausted or cooling)

    def usable_accounts(self) -> tuple[str, ...]:
        """Accounts whose key has not been refused."""
        with self._lock:
            return tuple(a for a, v in self._views.items() if not v.disabled)

    @staticmethod
    def _usable(view: _AccountView, now: datetime) -> bool:
        exhausted = view.exhausted_until is not None and view.exhausted_until > now
        return not view.disabled and not exhausted
