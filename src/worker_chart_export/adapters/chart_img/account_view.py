"""One CHART-IMG account as this process knows it (`AccountView`: its usage and pacing as
the last reservation saw them, its cooldown, set-aside, disabling or exhaustion, its key's
recent answers), and the margins it is paced with. AccountViews (account_views.py) keeps one
per account, under one lock."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.core.chart_img.key_history import KeyHistory
from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, AccountLimits
from worker_chart_export.core.chart_img.usage import Pacing
from worker_chart_export.core.naming import rfc3339_utc

# Pace a little under the plan's rate: the provider counts arrivals, we count sends, and
# instances' clocks and network paths differ by milliseconds.
PACING_HEADROOM = 0.9
# How much later than its slot a request may reach CHART-IMG relative to the one after it:
# measured on a 2-core machine, a burst sent while 96 charts started at once arrived 0.2 s late
# and the next, on time, met a 429 (benchmarks/bench_fleet.py). The burst is banked that much less.
ARRIVAL_JITTER_SECONDS = 0.3


@dataclass(frozen=True)
class PacingMargins:
    """How far under the plan's own limits each account is paced (see the constants)."""

    headroom: float = PACING_HEADROOM
    arrival_jitter: float = ARRIVAL_JITTER_SECONDS

    def pacing(self, limits: AccountLimits) -> Pacing:
        return Pacing(limits.rate_per_second * self.headroom, limits.burst, self.arrival_jitter)


@dataclass
class AccountView:
    """This process's last knowledge of one account; only used to choose the order."""

    config: AccountConfig
    daily_limit: int
    pacing: Pacing
    plan: str = DEFAULT_PLAN  # its declared plan, else CHART_IMG_PLAN: which calls it may serve
    usage_today: int = 0
    tat: float | None = None  # the shared pacing state as the last reservation saw it
    in_flight: int = 0  # picked, reservation not yet returned
    exhausted_until: datetime | None = None
    # CHART-IMG itself said the day's quota is gone (not just our count): see still_accepted
    provider_exhausted_until: datetime | None = None
    history: KeyHistory = field(default_factory=KeyHistory)  # its recent answers (monotonic moments)
    last_success: float | None = None  # its latest 200 (monotonic): it serves
    last_limited: float | None = None  # its latest 429 that was not the day's quota (monotonic)
    # set aside until then (here or, per the store, by another instance), then probed:
    disabled_until: datetime | None = None  # its key refused for two different requests
    set_aside_until: datetime | None = None  # the 429 streak rule

    @property
    def cool_until(self) -> float:
        """No call before this monotonic moment (0: never cooled)."""
        return self.history.cool_until

    def disabled(self, now: datetime) -> bool:
        return self.disabled_until is not None and self.disabled_until > now

    def expected_wait(self, now: float, moment: float) -> float:
        """How long one more request on this account would wait, by what this process
        knows: the pacing state its last reservation saw, advanced by one slot for each
        of its picks still reserving (so concurrent picks spread over the accounts
        instead of queueing on the one that looked free), or the cooldown."""
        tat = self.tat
        for _ in range(self.in_flight):
            tat = self.pacing.next_tat(tat, now)
        return max(self.pacing.send_time(tat, now) - now, self.cool_until - moment)

    def usable(self, now: datetime) -> bool:
        exhausted = self.exhausted_until is not None and self.exhausted_until > now
        set_aside = self.set_aside_until is not None and self.set_aside_until > now
        return not self.disabled(now) and not exhausted and not set_aside

    def serves(self, plans: Collection[str] | None) -> bool:
        """Its plan allows the call (`plans`: the call's serving plans; None: any)."""
        return plans is None or self.plan in plans

    def why_not(self, now: datetime, moment: float) -> str:
        """Why no call goes to it now, in words a failure can carry (never its key)."""
        if self.exhausted_until is not None and self.exhausted_until > now:
            return f"at its daily limit until {rfc3339_utc(self.exhausted_until)}"
        if self.disabled(now):
            assert self.disabled_until is not None
            return f"its key refused: disabled until {rfc3339_utc(self.disabled_until)}"
        if self.set_aside_until is not None and self.set_aside_until > now:
            return f"answering 429: set aside until {rfc3339_utc(self.set_aside_until)}"
        if self.cool_until > moment:
            return f"cooling down for {self.cool_until - moment:.1f} s"
        return f"its next send slot is {self.expected_wait(now.timestamp(), moment):.1f} s away"
