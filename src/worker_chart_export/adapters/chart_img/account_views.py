"""This process's view of the CHART-IMG accounts, for the limiter to choose well without
reading: what the last reservations said (usage, the shared pacing state), which accounts
are exhausted (cached), cooling down after a 429, or disabled, each key's recent answers (its
`core.chart_img.key_history.KeyHistory`: the 429 streak, refusals in a row), and the order the next
pick takes. Its own picks still reserving count as taken slots. Once a reservation shows that
another instance wrote an account meanwhile, the view is "behind": the limiter's next wave
reads every account first (`catch_up_ids`, `caught_up`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from worker_chart_export.adapters.chart_img.account_view import AccountView, PacingMargins
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.core.chart_img.key_history import (
    Answer,
    RateVerdict,
    StreakEvidence,
    after_rate_limit,
    after_refusal,
    after_success,
)
from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, AccountLimits, plan_named
from worker_chart_export.core.chart_img.set_aside import (
    COOL_UNTIL,
    DISABLED_UNTIL,
    SET_ASIDE_SECONDS,
    refusal_now,
)
from worker_chart_export.core.chart_img.usage import (
    Refund,
    daily_limit_of,
    exhausted_now,
    next_utc_midnight,
    tat_of,
    usage_today,
    window_start,
)
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.naming import moment_of
from worker_chart_export.core.retry import EXHAUSTED_RECHECK_SECONDS
from worker_chart_export.core.types import Reservation, ReservationRefusal


class AccountViews:
    """Every account's view, under one lock. Thread-safe; one per process."""

    def __init__(
        self,
        accounts: Sequence[AccountConfig],
        *,
        defaults: AccountLimits,
        clock: Clock,
        margins: PacingMargins | None = None,
        default_plan: str = DEFAULT_PLAN,
    ) -> None:
        if not accounts:
            raise ValueError("AccountLimiter needs at least one account")
        self._views: dict[str, AccountView] = {}
        for account in accounts:
            limits = account.limits(defaults)
            pacing = (margins or PacingMargins()).pacing(limits)
            plan = account.plan or plan_named(default_plan).name
            self._views[account.id] = AccountView(account, limits.daily_limit, pacing, plan)
        self._clock = clock
        self._ttl = timedelta(seconds=EXHAUSTED_RECHECK_SECONDS)
        self._lock = threading.Lock()
        # Set when a reservation shows another instance wrote an account since this process
        # last saw it: the views are behind, so the next wave reads them all first.
        self._behind = False

    @property
    def account_ids(self) -> tuple[str, ...]:
        return tuple(self._views)

    def __getitem__(self, account_id: str) -> AccountView:
        return self._views[account_id]

    def pick(
        self,
        tried: Collection[str],
        refused: Collection[str],
        plans: Collection[str] | None = None,
        only: Collection[str] | None = None,
    ) -> str | None:
        """The best account not yet refused in this acquire whose plan serves the call
        (`plans`; None: any), among `only` (None: any), counted in flight at once so the
        next concurrent caller ranks with this pick in mind.

        Order: not yet tried for this request, then the soonest expected slot (this
        process's picks still reserving counted as taken slots), then least used (those
        picks counted too), then id."""
        now, moment = self._clock.now(), self._clock.monotonic()
        with self._lock:
            usable = [
                v
                for v in self._views.values()
                if v.config.id not in refused and v.serves(plans, only) and v.usable(now)
            ]
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

    def release(self, account_id: str) -> None:
        """The pick's reservation returned (or never started)."""
        with self._lock:
            self._views[account_id].in_flight -= 1

    def hold(self, account_id: str) -> None:
        """Counted in flight as a pick is, for a reservation on this very account."""
        with self._lock:
            self._views[account_id].in_flight += 1

    def reinstated(self, account_id: str) -> None:
        """The key's disabling is undone: a known-good chart showed it works (or could not
        show it does not), so the requests, not the key, were refused."""
        with self._lock:
            self._views[account_id].disabled_until = None

    def cooling(self, account_id: str) -> float:
        """Seconds until the account's rate cooldown ends (0: not cooling)."""
        return max(0.0, self._views[account_id].cool_until - self._clock.monotonic())

    def learn(self, account_id: str, reservation: Reservation, *, units: int) -> None:
        """What a reservation (taking `units` units here) said of its account. Called under
        the account's reserve lock, so this process's own reservations are all counted."""
        now = self._clock.now()
        with self._lock:
            view = self._views[account_id]
            if reservation.usage_today > view.usage_today + units:
                self._behind = True  # someone else reserved on it meanwhile
            view.usage_today = reservation.usage_today
            if reservation.tat is not None:
                view.tat = reservation.tat
            asked_again = min(now + self._ttl, next_utc_midnight(now))  # then the store says
            if reservation.refusal is ReservationRefusal.EXHAUSTED:
                view.exhausted_until = asked_again
            elif reservation.refusal is ReservationRefusal.DISABLED:  # by another instance
                view.disabled_until = asked_again
            elif reservation.refusal is ReservationRefusal.COOLING:  # set aside by another instance
                view.set_aside_until = asked_again

    def given_back(self, account_id: str, refund: Refund) -> None:
        """A unit of the account given back: its count as the store now has it."""
        if not refund.given_back:
            return
        with self._lock:
            self._views[account_id].usage_today = refund.usage_today

    def fell_behind(self) -> None:
        """A wave's account was left out (changed meanwhile, or not known here)."""
        with self._lock:
            self._behind = True

    def catch_up_ids(self) -> list[str] | None:
        """The usable accounts to read when the view is behind (then no longer marked so),
        else None."""
        now = self._clock.now()
        with self._lock:
            if not self._behind:
                return None
            self._behind = False
            return [a for a, v in self._views.items() if v.usable(now)]

    def caught_up(self, docs: Mapping[str, Mapping[str, Any] | None]) -> None:
        """The accounts' documents as just read: usage, pacing (only forward), exhaustion."""
        now = self._clock.now()
        with self._lock:
            for account_id, doc in docs.items():
                view = self._views[account_id]
                view.usage_today = usage_today(doc, now)
                fresh = tat_of(doc)
                if fresh is not None and (view.tat is None or fresh > view.tat):
                    view.tat = fresh  # the shared state only moves forward
                full = view.usage_today >= daily_limit_of(doc, view.daily_limit)
                if full or exhausted_now(doc, now) is not None:  # our count, or CHART-IMG said so
                    view.exhausted_until = min(now + self._ttl, next_utc_midnight(now))
                refusal = refusal_now(doc or {}, now, window_start(now))
                if refusal is ReservationRefusal.DISABLED:
                    view.disabled_until = moment_of((doc or {}).get(DISABLED_UNTIL)) or next_utc_midnight(now)
                elif refusal is ReservationRefusal.COOLING:
                    view.set_aside_until = moment_of((doc or {}).get(COOL_UNTIL))

    # --- what CHART-IMG said about an account ---

    def provider_exhausted(self, account_id: str, now: datetime) -> None:
        """After CHART-IMG's quota answer: out until the next UTC midnight."""
        with self._lock:
            self._exhaust(self._views[account_id], now)

    @staticmethod
    def _exhaust(view: AccountView, now: datetime) -> None:
        view.exhausted_until = view.provider_exhausted_until = next_utc_midnight(now)

    def rate_limited(
        self, account_id: str, answer: Answer, retry_after: float | None, *, probe: bool = False
    ) -> RateVerdict:
        """After a 429 that is not the day's quota: the key cools down, escalating; set aside
        (core/chart_img/set_aside.py) when the streak rule finds it the key's own problem, or when the
        429 answered its probe. `throttled` when every usable key hears 429 at once."""
        now, moment = self._clock.now(), self._clock.monotonic()
        with self._lock:
            view = self._views[account_id]
            others = [v for v in self._views.values() if v is not view]
            view.history, verdict = after_rate_limit(
                view.history,
                replace(answer, retry_after=retry_after),
                at=moment,
                day=window_start(now),
                evidence=StreakEvidence(
                    view.usage_today < view.daily_limit,
                    max((v.last_success for v in others if v.last_success), default=None),
                    max((v.last_limited for v in others if v.last_limited), default=None),
                ),
            )
            view.last_limited = moment
            if verdict.set_aside is not None or probe:
                view.set_aside_until = now + timedelta(seconds=SET_ASIDE_SECONDS)
                return replace(verdict, cooling=0.0)
            usable = [v for v in self._views.values() if v.usable(now)]
            return replace(verdict, throttled=all(v.history.cooldowns > 0 for v in usable))

    def refused(
        self, account_id: str, answer: Answer, *, probe: bool = False
    ) -> tuple[bool, tuple[Answer, ...]]:
        """CHART-IMG refused the key: (whether it is disabled now, for SET_ASIDE_SECONDS; the
        refusals of different requests that disabled it just now, else ()). A refused probe
        disables it again at once."""
        now = self._clock.now()
        with self._lock:
            view = self._views[account_id]
            if view.disabled(now):  # an answer to a call sent before: nothing more to decide
                return True, ()
            view.history, refusals = after_refusal(view.history, answer, day=window_start(now))
            if probe and not refusals:
                refusals = (answer,)
            if refusals:
                view.disabled_until = now + timedelta(seconds=SET_ASIDE_SECONDS)
            return bool(refusals), refusals

    def succeeded(self, account_id: str) -> bool:
        """The key answered 200: its 429 streak and refusals are over; it serves. True when
        that ends a set-aside or a disabling this view held (a probe's answer, or one to a
        call sent before): the key works."""
        now = self._clock.now()
        with self._lock:
            view = self._views[account_id]
            view.history = after_success(view.history)
            view.last_success = self._clock.monotonic()
            held = view.disabled(now) or (view.set_aside_until is not None and view.set_aside_until > now)
            view.set_aside_until = view.disabled_until = None
            return held

    def exhausted_accounts(
        self, plans: Collection[str] | None = None, only: Collection[str] | None = None
    ) -> tuple[str, ...]:
        """The accounts (of `plans`, among `only`; None: all) out of quota now."""
        now = self._clock.now()
        with self._lock:
            return tuple(
                sorted(
                    a
                    for a, v in self._views.items()
                    if v.serves(plans, only) and v.exhausted_until is not None and v.exhausted_until > now
                )
            )

    def standing(
        self, plans: Collection[str] | None, only: Collection[str] | None = None
    ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        """((account, why no call goes to it now) of each account (among `only`) whose plan
        serves the call, (account, plan) of each whose plan does not): what a chart no
        account took is told."""
        now, moment = self._clock.now(), self._clock.monotonic()
        with self._lock:
            serving = tuple(
                (a, v.why_not(now, moment)) for a, v in self._views.items() if v.serves(plans, only)
            )
            others = tuple((a, v.plan) for a, v in self._views.items() if v.plan_serves(plans, only))
        return serving, others

    def all_disabled(self, plans: Collection[str] | None = None, only: Collection[str] | None = None) -> bool:
        """Every account (of `plans`, among `only`; None: all) has its key disabled; False when
        there is none."""
        now = self._clock.now()
        with self._lock:
            serving = [v for v in self._views.values() if v.serves(plans, only)]
            return bool(serving) and all(v.disabled(now) for v in serving)

    def still_accepted(self, account_id: str) -> bool:
        """CHART-IMG has not refused the account since: no quota answer, no cooldown, key
        not disabled. (That our own count reached the daily limit does not matter here: a
        unit already reserved is within it.)"""
        now = self._clock.now()
        with self._lock:
            view = self._views[account_id]
            until = view.provider_exhausted_until
            exhausted = until is not None and until > now
            cooling = view.cool_until > self._clock.monotonic()
            set_aside = view.set_aside_until is not None and view.set_aside_until > now
            return not (view.disabled(now) or exhausted or cooling or set_aside)

    def serving_accounts(self, plans: Collection[str] | None) -> tuple[str, ...]:
        """Accounts whose plan is one of `plans` (None: any), their keys disabled or not."""
        with self._lock:
            return tuple(a for a, v in self._views.items() if v.serves(plans, None))

    def usable_accounts(
        self, plans: Collection[str] | None = None, only: Collection[str] | None = None
    ) -> tuple[str, ...]:
        """Accounts (whose plan is one of `plans`, among `only`; None: any) whose key is not
        disabled."""
        now = self._clock.now()
        with self._lock:
            return tuple(a for a, v in self._views.items() if v.serves(plans, only) and not v.disabled(now))
