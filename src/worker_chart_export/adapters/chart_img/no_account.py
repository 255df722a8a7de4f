"""Why no account could take a call: each account's own reason (exhausted for the day, no
send slot in time, its key disabled, set aside or cooling), and the accounts whose plan does
not serve it, as the chart's failure tells them (attempts.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from worker_chart_export.adapters.chart_img.account_views import AccountViews


class NoAccountReason(StrEnum):
    EXHAUSTED = "EXHAUSTED"  # every account that serves the call is at its daily limit (for the day)
    NO_TIME = "NO_TIME"  # no send slot frees up within the time left
    NO_USABLE_KEY = "NO_USABLE_KEY"  # every account's key is disabled (refused by CHART-IMG)
    SET_ASIDE = "SET_ASIDE"  # none can take it now, not all for the day (set aside, cooling...)


@dataclass(frozen=True)
class NoAccount:
    reason: NoAccountReason
    exhausted_accounts: tuple[str, ...]
    # what the failure tells, not what the refusal is: each account whose plan serves the
    # call and why it took none; each other (account, plan)
    standing: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    other_plans: tuple[tuple[str, str], ...] = field(default=(), compare=False)


def no_account(
    views: AccountViews, busy: bool, plans: Collection[str] | None, only: Collection[str] | None
) -> NoAccount:
    """Why no account (of those whose plan serves the call, among `only`) could take it:
    each one's own reason, and the accounts whose plan does not serve it."""
    exhausted = views.exhausted_accounts(plans, only)
    standing, others = views.standing(plans, only)
    if busy:
        reason = NoAccountReason.NO_TIME
    elif views.all_disabled(plans, only):
        reason = NoAccountReason.NO_USABLE_KEY
    elif len(exhausted) == len(standing):  # (none serves it: validation's to refuse)
        reason = NoAccountReason.EXHAUSTED
    else:
        reason = NoAccountReason.SET_ASIDE
    return NoAccount(reason, exhausted, standing, others)
