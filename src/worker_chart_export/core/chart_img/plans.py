"""CHART-IMG's documented plans as data (doc.chart-img.com, "Request Limit").

A plan sets an account's defaults (rate, burst, daily limit) and what a request may ask for
(resolution, studies + drawings). Source: the provider's Rate Limit, Resolution Limit and
Parameter Limit tables; ENTERPRISE is "35+/50+/5000+" there, taken at its floor.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

# Every plan: the smallest chart CHART-IMG renders (Snapshot v2 width/height "Min").
MIN_WIDTH = 400
MIN_HEIGHT = 300


@dataclass(frozen=True)
class Plan:
    name: str
    rate_per_second: float
    burst: int
    daily_limit: int
    max_width: int
    max_height: int
    max_parameters: int  # studies[] + drawings[] per request


PLANS: dict[str, Plan] = {
    plan.name: plan
    for plan in (
        Plan("BASIC", 1.0, 3, 50, 800, 600, 3),
        Plan("PRO", 10.0, 15, 500, 1920, 1080, 5),
        Plan("MEGA", 15.0, 25, 1000, 1920, 1600, 10),
        Plan("ULTRA", 35.0, 50, 3000, 2048, 1920, 25),
        Plan("ENTERPRISE", 35.0, 50, 5000, 2048, 1920, 50),
    )
}
DEFAULT_PLAN = "BASIC"


def plan_named(name: str) -> Plan:
    """The plan called `name` (any case); ValueError naming the known plans otherwise."""
    plan = PLANS.get(name.upper())
    if plan is None:
        raise ValueError(f"unknown CHART-IMG plan {name!r} (known: {', '.join(PLANS)})")
    return plan


@dataclass(frozen=True)
class AccountLimits:
    """What one account may do: its daily quota and its pacing."""

    daily_limit: int
    rate_per_second: float
    burst: int


def account_limits(
    defaults: AccountLimits,
    *,
    plan: str | None = None,
    daily_limit: int | None = None,
    rate_per_second: float | None = None,
    burst: int | None = None,
) -> AccountLimits:
    """Explicit account values win; else the account's plan, when it names one; else the
    configured defaults (the contract's 44/day, BASIC's pacing)."""
    base = defaults
    if plan is not None:
        named = plan_named(plan)
        base = AccountLimits(named.daily_limit, named.rate_per_second, named.burst)
    return AccountLimits(
        daily_limit if daily_limit is not None else base.daily_limit,
        rate_per_second if rate_per_second is not None else base.rate_per_second,
        burst if burst is not None else base.burst,
    )


def rank(plan: Plan) -> int:
    """Where the plan stands among CHART-IMG's, smallest first (each allows at least what the
    ones before it allow: sizes, parameters, watermarks)."""
    return list(PLANS).index(plan.name)


@dataclass(frozen=True)
class AccountPlans:
    """The plan of each configured account: its declared `plan`, else `default` (the
    CHART_IMG_PLAN setting). Without accounts (mock mode), `default` stands for them all.
    A template is valid when some account's plan allows it, and its calls go only to the
    accounts whose plan allows it (docs/design.md, "Each account's plan")."""

    default: Plan
    by_account: tuple[tuple[str, Plan], ...] = ()

    @classmethod
    def of(cls, default: Plan, declared: Sequence[tuple[str, str | None]]) -> AccountPlans:
        """From each account's id and declared plan (None: the default)."""
        return cls(default, tuple((a, plan_named(p) if p else default) for a, p in declared))

    @property
    def plans(self) -> tuple[Plan, ...]:
        """The distinct plans the accounts have, smallest first."""
        found = {plan for _, plan in self.by_account} or {self.default}
        return tuple(sorted(found, key=rank))

    @property
    def best(self) -> Plan:
        return self.plans[-1]

    def accounts_on(self, plan_names: Collection[str]) -> tuple[str, ...]:
        return tuple(a for a, plan in self.by_account if plan.name in plan_names)

    def describe(self) -> str:
        """The accounts' plans as a reader wants them in a message: `acc1 BASIC, acc2 PRO`."""
        if not self.by_account:
            return f"CHART_IMG_PLAN {self.default.name}, no account configured"
        return ", ".join(f"{account} {plan.name}" for account, plan in self.by_account)


# No account configured: the default plan (BASIC) stands for them all
DEFAULT_PLANS = AccountPlans(PLANS[DEFAULT_PLAN])
