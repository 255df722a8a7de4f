"""Which CHART-IMG account the next HTTP attempt uses (worker contract §14.4).

One HTTP attempt = one transaction on `chart_img_accounts_usage/{accountId}` that takes a
unit of the day's quota and the account's next send slot (core/usage.py): the pacing is
shared by every instance through that document. This process only keeps a cheap view to
choose well without reading (account_views.py): what the last reservations said, which
accounts are exhausted, cooling down or disabled, and what each key answered lately. What
CHART-IMG says about a key is told here (`mark_exhausted`, `rate_limited`, `key_refused`,
`succeeded`), judged by core/key_history.py, and persisted in the usage document when it
matters to every instance and to `worker-chart-export accounts` (exhausted, disabled). Once
a reservation shows that another instance wrote an account meanwhile, the next wave reads
every account first (one round trip), so a fleet's waves do not queue on keys that only look
free.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from enum import StrEnum

from pydantic import SecretStr

from worker_chart_export import known_keys
from worker_chart_export.adapters.account_views import AccountViews, PacingMargins
from worker_chart_export.adapters.accounts_config import AccountConfig
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.key_history import Answer, RateVerdict, quota_reason, refused_reason
from worker_chart_export.core.plans import AccountLimits
from worker_chart_export.core.types import Reservation, ReservationRefusal
from worker_chart_export.core.usage import ReservationRequest
from worker_chart_export.logs import get_logger
from worker_chart_export.service.ports import UsageStore

__all__ = ["AccountLimiter", "Lease", "NoAccount", "PacingMargins", "Refusal"]


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
    NO_USABLE_KEY = "NO_USABLE_KEY"  # every account's key is disabled (refused by CHART-IMG)


@dataclass(frozen=True)
class NoAccount:
    reason: Refusal
    exhausted_accounts: tuple[str, ...]


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
        self._views = AccountViews(
            accounts, defaults=defaults, clock=clock, exhausted_ttl=exhausted_ttl, margins=margins
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

    def acquire(self, *, tried: Collection[str] = (), max_wait: float) -> Lease | NoAccount:
        """Reserve quota and a send slot on the best account (`AccountViews.pick`'s order),
        then wait for the slot. A refused account costs one transaction and the next is tried.
        """
        busy, refused = False, set[str]()
        while (account_id := self._views.pick(tried, refused)) is not None:
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
        while len(picks) < count and (account_id := self._views.pick((), cooling)) is not None:
            if self._views.cooling(account_id) > 0:
                cooling.add(account_id)
                self._views.release(account_id)
                continue
            picks.append(account_id)
        try:
            return self._reserve_wave(Counter(picks), max_wait)
        finally:
            for account_id in picks:
                self._views.release(account_id)

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
                self._views.fell_behind()
            for account_id, reservations in answer.items():
                api_key = self._views[account_id].config.api_key
                taken = [Lease(account_id, api_key, r, 0.0) for r in reservations if r.reserved]
                if reservations:
                    self._views.learn(account_id, reservations[-1], units=len(taken))
                leases += taken
        return sorted(leases, key=lambda lease: lease.reservation.send_at or self._clock.now())

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

    def wait_for_slot(self, lease: Lease) -> Lease:
        """Sleeps until the lease's send slot; the lease, saying how long that was."""
        assert lease.reservation.send_at is not None  # a reservation always says when
        wait = (lease.reservation.send_at - self._clock.now()).total_seconds()
        if wait > 0:
            self._clock.sleep(wait)
        return replace(lease, paced_seconds=lease.paced_seconds + max(0.0, wait))

    def _try(self, account_id: str, max_wait: float) -> Lease | ReservationRefusal:
        view = self._views[account_id]
        try:
            cooling = self._views.cooling(account_id)
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
                self._views.learn(account_id, reservation, units=int(reservation.reserved))
        finally:
            self._views.release(account_id)
        if not reservation.reserved:
            return reservation.refusal or ReservationRefusal.EXHAUSTED
        assert reservation.send_at is not None  # a reservation always says when
        wait = max(cooling, (reservation.send_at - self._clock.now()).total_seconds())
        if wait > 0:
            self._clock.sleep(wait)
        return Lease(account_id, view.config.api_key, reservation, max(0.0, wait))

    def _no_account(self, busy: bool) -> NoAccount:
        exhausted = self.exhausted_accounts()
        if busy:
            return NoAccount(Refusal.NO_TIME, exhausted)
        all_disabled = self._views.all_disabled()
        return NoAccount(Refusal.NO_USABLE_KEY if all_disabled else Refusal.EXHAUSTED, exhausted)

    # --- what CHART-IMG said about an account (api.py tells; the rules: core.key_history) ---

    def mark_exhausted(self, account_id: str, answer: Answer) -> None:
        """After CHART-IMG's quota answer: out until the next UTC midnight (store + cache)."""
        self._views.provider_exhausted(account_id, self._clock.now())
        self._persist_exhausted(account_id, quota_reason(answer))

    def rate_limited(self, account_id: str, answer: Answer, retry_after: float | None) -> RateVerdict:
        """After any other 429: the key cools down (Retry-After, else escalating). A key that
        keeps answering 429 while our count says it has quota is out for the day: one ERROR
        naming the account and the answers seen (never the key), persisted with its reason."""
        verdict = self._views.rate_limited(account_id, answer, retry_after)
        streak = verdict.exhausted
        if streak is not None:
            view = self._views[account_id]
            get_logger().error(
                "chart-img key keeps answering 429: exhausted for the day",
                accountId=account_id,
                error={"code": "CHART_API_LIMIT_EXCEEDED"},
                answers=streak.as_log(),
                answered429=streak.seen,
                cooldowns=streak.cooldowns,
                spanSeconds=round(streak.span_seconds, 1),
                usedToday=view.usage_today,
                dailyLimit=view.daily_limit,
            )
            self._persist_exhausted(account_id, streak.reason(view.usage_today, view.daily_limit))
        return verdict

    def key_refused(self, account_id: str, answer: Answer) -> bool:
        """After CHART-IMG refused the key (401, 403 "Forbidden"): True when the key is
        disabled: refused again with no success between (then one ERROR line, and no instance
        uses it for the rest of the UTC day), or already. False: the call only moves on."""
        disabled, refusals = self._views.refused(account_id, answer)
        if not refusals:
            return disabled
        get_logger().error(
            "chart-img account key refused: account disabled",
            accountId=account_id,
            error={"code": "CHART_API_KEY_REFUSED"},
            answers=[{"httpStatus": a.status, "message": a.message} for a in refusals],
        )
        reason = known_keys.redaction().text(refused_reason(refusals))
        self._best_effort(
            lambda: self._store.mark_disabled(account_id, reason=reason, now=self._clock.now()),
            "chart-img account disabling not persisted",
            account_id,
        )
        return True

    def succeeded(self, account_id: str) -> None:
        """The key answered 200: its 429 streak and refusals are over."""
        self._views.succeeded(account_id)

    def _persist_exhausted(self, account_id: str, reason: str) -> None:
        limit = self._views[account_id].daily_limit
        reason = known_keys.redaction().text(reason)  # a usage document is an exit
        self._best_effort(
            lambda: self._store.mark_exhausted(
                account_id, default_limit=limit, now=self._clock.now(), reason=reason
            ),
            "chart-img account exhaustion not persisted",
            account_id,
        )

    @staticmethod
    def _best_effort(write: Callable[[], None], failed: str, account_id: str) -> None:
        try:
            write()
        except Exception as exc:  # best effort (§14.4): this process already stays off it
            get_logger().warning(failed, accountId=account_id, errorKind=type(exc).__name__)

    def exhausted_accounts(self) -> tuple[str, ...]:
        return self._views.exhausted_accounts()

    def still_accepted(self, account_id: str) -> bool:
        """See `AccountViews.still_accepted`."""
        return self._views.still_accepted(account_id)

    def usable_accounts(self) -> tuple[str, ...]:
        """Accounts whose key is not disabled."""
        return self._views.usable_accounts()
