"""Which CHART-IMG account the next HTTP attempt uses (worker contract §14.4).

One HTTP attempt = one transaction on `chart_img_accounts_usage/{accountId}` that takes a
unit of the day's quota and the account's next send slot (core/chart_img/usage.py): the pacing is
shared by every instance through that document. This process only keeps a cheap view to
choose well without reading (account_views.py): what the last reservations said, which
accounts are exhausted, cooling down, set aside or disabled, and what each key answered
lately. What CHART-IMG says about a key is told here (`mark_exhausted`, `rate_limited`,
`key_refused`, `succeeded`: key_verdicts.py), judged by core/chart_img/key_history.py, and persisted in
the usage document when it matters to every instance and to `worker-chart-export accounts`.
A call that never left gives its unit back (`give_back`). Only accounts whose plan serves a
call are picked for it (`plans`: the call's serving plans), and only among the accounts a
layout chart may go to (`only`: those with a TradingView session fit for it). Once
a reservation shows that another instance wrote an account meanwhile, the next wave reads
every account first (one round trip), so a fleet's waves do not queue on keys that only look
free.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import SecretStr

from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.account_view import PacingMargins
from worker_chart_export.adapters.chart_img.account_views import AccountViews
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.chart_img.key_verdicts import KeyVerdicts
from worker_chart_export.adapters.chart_img.no_account import NoAccount, NoAccountReason, no_account
from worker_chart_export.adapters.chart_img.usage_store import UsageStore
from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, AccountLimits
from worker_chart_export.core.chart_img.usage import Refund, ReservationRequest
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import Reservation, ReservationRefusal
from worker_chart_export.logs import get_logger

__all__ = ["UNIT_HOLD_SECONDS", "AccountLimiter", "Lease", "NoAccount", "NoAccountReason", "PacingMargins"]


@dataclass(frozen=True)
class Lease:
    """Permission for one HTTP attempt: a reserved quota unit and a send slot, both taken."""

    account_id: str
    api_key: SecretStr
    reservation: Reservation
    paced_seconds: float  # how long we waited for the send slot

    def slot_in(self, now: datetime) -> float:
        """Seconds until the send slot (0 when it has come)."""
        assert self.reservation.send_at is not None  # a reservation always says when
        return max(0.0, (self.reservation.send_at - now).total_seconds())


# a wait shorter than this is no wait: float rounding between the slot this process computed
# and the one the store wrote, far inside the pacing's arrival jitter
SLOT_GRAIN = 1e-3
# The longest a reserved unit waits for its call. A unit held through a wait is lost with the
# instance if it dies meanwhile (counted, though no call left: issue 27, units == calls), and
# a call held to a slot another instance took meanwhile queues there while other keys'
# slots come sooner (bench_fleet: 23 to 26 calls per key where 24 is even). A fraction of a
# slot at BASIC's pace, most of a burst on the faster plans.
UNIT_HOLD_SECONDS = 0.25


@dataclass(frozen=True)
class _Later:
    """The account's slot, as the store knows it, is further than UNIT_HOLD_SECONDS but
    within the wait allowed: choose again (the view knows that slot now). `waited`: the
    seconds this try slept before it asked."""

    waited: float


class AccountLimiter(KeyVerdicts):
    """Chooses, reserves and paces accounts; told what CHART-IMG said of each key
    (KeyVerdicts). Thread-safe; one per process, shared by steps."""

    def __init__(
        self,
        accounts: Sequence[AccountConfig],
        store: UsageStore,
        *,
        defaults: AccountLimits,
        clock: Clock,
        margins: PacingMargins | None = None,
        default_plan: str = DEFAULT_PLAN,
    ) -> None:
        self._views = AccountViews(
            accounts,
            defaults=defaults,
            clock=clock,
            margins=margins,
            default_plan=default_plan,
        )
        self._store = store
        self._clock = clock
        known_keys.learn(account.api_key.get_secret_value() for account in accounts)  # it sends them
        # One reservation per account at a time in this process: concurrent transactions
        # on one usage document would only contend (Firestore aborts and retries them).
        self._reserve_locks = {a.id: threading.Lock() for a in accounts}

    @property
    def account_ids(self) -> tuple[str, ...]:
        return self._views.account_ids

    def acquire(
        self,
        *,
        tried: Collection[str] = (),
        max_wait: float,
        plans: Collection[str] | None = None,
        only: Collection[str] | None = None,
    ) -> Lease | NoAccount:
        """Reserve quota and a send slot on the best account whose plan serves the call
        (`plans`: its serving plans; None: any), among `only` (None: any), in
        `AccountViews.pick`'s order. The slot may
        still be up to UNIT_HOLD_SECONDS ahead: `wait_for_slot` before sending. A refused
        account costs one transaction and the next is tried. An
        account whose slot another instance took meanwhile (`_Later`: the store's slot is
        more than UNIT_HOLD_SECONDS away, yet within `max_wait`) is not held to: its real
        slot is known now, and the pick chooses again among every account, so a fleet's
        calls go to the soonest slots wherever they are (threads of this process racing for
        one key's slot lose to each other without a round trip: the version they plan on is
        the one this process wrote).
        """
        started, busy, refused = self._clock.monotonic(), False, set[str]()
        waited_before = 0.0
        while (account_id := self._views.pick(tried, refused, plans, only)) is not None:
            outcome = self._try(account_id, max_wait - (self._clock.monotonic() - started))
            if isinstance(outcome, Lease):
                return replace(outcome, paced_seconds=waited_before + outcome.paced_seconds)
            if isinstance(outcome, _Later):
                # The view has learned that slot, so choosing this account again waits for
                # it first: every round moves the clock on, and `max_wait` ends the rounds.
                waited_before += outcome.waited
                self._views.fell_behind()  # other instances are reserving: read them all
                self._catch_up()
                continue
            refused.add(account_id)
            busy = busy or outcome is ReservationRefusal.BUSY
        return no_account(self._views, busy, plans, only)

    def acquire_many(self, wave: Sequence[Collection[str] | None], *, max_wait: float) -> list[Lease | None]:
        """A lease for each call of a step's first wave where the store can give one, in ONE
        round trip; `wave`: each call's serving plans (None: any account). Accounts are
        picked as acquire() picks them, one after another, so the wave spreads; a cooling
        account is left out. The answer is aligned with `wave`: None where the store knew
        too little or refused (that call acquire()s on its own). A lease's slot may still be
        ahead: `wait_for_slot` before sending. When other instances have been reserving on
        these accounts, one read of them all comes first (`_catch_up`)."""
        self._catch_up()
        picks = [self._pick_not_cooling(plans) for plans in wave]
        try:
            return self._reserve_wave(picks, max_wait)
        finally:
            for account_id in picks:
                if account_id is not None:
                    self._views.release(account_id)

    def _pick_not_cooling(self, plans: Collection[str] | None) -> str | None:
        cooling: set[str] = set()
        while (account_id := self._views.pick((), cooling, plans)) is not None:
            if self._views.cooling(account_id) <= 0:
                return account_id
            cooling.add(account_id)
            self._views.release(account_id)
        return None

    def _reserve_wave(self, picks: list[str | None], max_wait: float) -> list[Lease | None]:
        counts = Counter(a for a in picks if a is not None)
        if not counts:
            return [None] * len(picks)
        requests = [
            ReservationRequest(a, n, self._views[a].daily_limit, self._views[a].pacing)
            for a, n in sorted(counts.items())
        ]
        taken: dict[str, list[Lease]] = {}
        with ExitStack() as locks:
            for request in requests:  # sorted: concurrent waves cannot deadlock
                locks.enter_context(self._reserve_locks[request.account_id])
            answer = self._store.reserve_many(requests, now=self._clock.now(), max_wait=max_wait)
            if set(counts) - set(answer):  # left out: changed meanwhile, or not known here
                self._views.fell_behind()
            for account_id, reservations in answer.items():
                api_key = self._views[account_id].config.api_key
                taken[account_id] = [Lease(account_id, api_key, r, 0.0) for r in reservations if r.reserved]
                if reservations:
                    self._views.learn(account_id, reservations[-1], units=len(taken[account_id]))
        # each account's leases, soonest slot first, to the calls that picked it, in order
        return [taken[a].pop(0) if a is not None and taken.get(a) else None for a in picks]

    def _catch_up(self) -> None:
        """When another instance has written the accounts since this process saw them, a
        wave picked on the old view would queue on the keys that only look free (the
        fleet benchmark: 22 to 27 calls per key instead of 24). One read of every usable
        account brings the view, and the store's versions, up to date. Best effort."""
        ids = self._views.catch_up_ids()
        if ids is None:
            return
        try:
            docs = self._store.read(ids)
        except TransientStoreError:
            return  # the wave goes on what is known; its reservations still hold exactly
        self._views.caught_up(docs)

    def reserve_on(self, account_id: str, *, max_wait: float) -> Lease | None:
        """A unit and a send slot on this very account, whatever this process's view says of
        its key (a key's check with a known-good chart); None when the store refuses it or
        its slot is further than `max_wait` (at most UNIT_HOLD_SECONDS)."""
        self._views.hold(account_id)  # `_try` releases it as it releases a pick
        try:
            outcome = self._try(account_id, min(max_wait, UNIT_HOLD_SECONDS))
        except TransientStoreError:
            return None
        return outcome if isinstance(outcome, Lease) else None

    def wait_for_slot(self, lease: Lease) -> Lease:
        """Sleeps until the lease's send slot (at most UNIT_HOLD_SECONDS away); the lease,
        saying how long that was."""
        wait = lease.slot_in(self._clock.now())
        if wait > 0:
            self._clock.sleep(wait)
        return replace(lease, paced_seconds=lease.paced_seconds + wait)

    def _try(self, account_id: str, max_wait: float) -> Lease | ReservationRefusal | _Later:
        """One reservation on the account, its unit taken only when its slot is at most
        UNIT_HOLD_SECONDS away (the slot this process knows of is waited out first)."""
        view = self._views[account_id]
        try:
            waited = self._wait_before_reserving(account_id, max_wait)
            if waited is None:
                return ReservationRefusal.BUSY
            with self._reserve_locks[account_id]:
                reservation = self._store.reserve(
                    account_id,
                    default_limit=view.daily_limit,
                    now=self._clock.now(),
                    pacing=view.pacing,
                    max_wait=min(max_wait - waited, UNIT_HOLD_SECONDS),
                )
                self._views.learn(account_id, reservation, units=int(reservation.reserved))
        finally:
            self._views.release(account_id)
        if not reservation.reserved:
            refusal = reservation.refusal or ReservationRefusal.EXHAUSTED
            later = refusal is ReservationRefusal.BUSY and self._slot_within(account_id, max_wait - waited)
            return _Later(waited) if later else refusal
        # its slot may still be up to UNIT_HOLD_SECONDS ahead: the caller says it holds the
        # unit (its log line), then `wait_for_slot`
        return Lease(account_id, view.config.api_key, reservation, waited)

    def _slot_within(self, account_id: str, seconds: float) -> bool:
        """The account's next send slot, as the store just said, is at most `seconds` away."""
        view, now = self._views[account_id], self._clock.now().timestamp()
        return view.pacing.send_time(view.tat, now) - now <= seconds

    def _wait_before_reserving(self, account_id: str, max_wait: float) -> float | None:
        """Sleeps out the key's cooldown and the send slot this process knows of, BEFORE its
        unit is reserved: a unit held through them (up to 30 s of cooldown in a CHART-IMG-wide
        throttle, seconds of a BASIC key's pace) is lost with the process if it dies meanwhile,
        counted though no call left (issue 27: units == calls). The shared state only moves
        forward, so the slot this process last saw is a lower bound: when even that is further
        than `max_wait`, no transaction can do better (None). Seconds waited, else."""
        view, waited = self._views[account_id], 0.0
        while True:
            now = self._clock.now().timestamp()
            ahead = max(self._views.cooling(account_id), view.pacing.send_time(view.tat, now) - now)
            if ahead <= SLOT_GRAIN:
                return waited
            if waited + ahead > max_wait:
                return None
            self._clock.sleep(ahead)
            waited += ahead

    def give_back(self, lease: Lease) -> Refund | None:
        """The lease's unit given back: its call never reached CHART-IMG (no connection was
        made, or it was never sent). Best effort: None when the store could not be written
        (one WARNING; the unit then stays counted, as a call that may have left would)."""
        day = lease.reservation.day
        if day is None:
            return None
        try:
            refund = self._store.refund(lease.account_id, day=day)
        except Exception as exc:  # the count stays one high: the cautious side
            get_logger().warning(
                "chart-img unit not given back", accountId=lease.account_id, errorKind=type(exc).__name__
            )
            return None
        self._views.given_back(lease.account_id, refund)
        return refund

    def exhausted_accounts(self) -> tuple[str, ...]:
        return self._views.exhausted_accounts()

    def still_accepted(self, account_id: str) -> bool:
        """See `AccountViews.still_accepted`."""
        return self._views.still_accepted(account_id)

    def serving_accounts(self, plans: Collection[str] | None) -> tuple[str, ...]:
        """Accounts whose plan is one of `plans` (None: any), their keys disabled or not."""
        return self._views.serving_accounts(plans)

    def usable_accounts(
        self, plans: Collection[str] | None = None, only: Collection[str] | None = None
    ) -> tuple[str, ...]:
        """Accounts (whose plan is one of `plans`, among `only`; None: any) whose key is not
        disabled."""
        return self._views.usable_accounts(plans, only)
