"""The daily usage window of one CHART-IMG account (contract §14.4), as pure functions.

Both usage stores (Firestore, in-memory/file) run these inside their own atomic section,
so the rule lives in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from worker_chart_export.core.types import AccountUsage, Reservation


def window_start(now: datetime) -> str:
    """Start of `now`'s UTC day, as `YYYY-MM-DDT00:00:00Z`."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT00:00:00Z")


def current_usage(
    account_id: str, doc: Mapping[str, Any] | None, *, default_limit: int, now: datetime
) -> AccountUsage:
    """Usage as of `now`: a missing or previous-day window counts as zero used."""
    doc = doc or {}
    limit = doc.get("dailyLimit")
    daily_limit = limit if isinstance(limit, int) and limit >= 0 else default_limit
    used = doc.get("usageToday")
    fresh = doc.get("windowStart") == window_start(now)
    usage_today = used if fresh and isinstance(used, int) and used >= 0 else 0
    return AccountUsage(account_id=account_id, usage_today=usage_today, daily_limit=daily_limit)


def reserve_one(
    account_id: str, doc: Mapping[str, Any] | None, *, default_limit: int, now: datetime
) -> tuple[dict[str, Any] | None, Reservation]:
    """(fields to write or None when nothing changes, the reservation).

    A stale window is reset even when the account is then found exhausted, so the stored
    document always describes today.
    """
    usage = current_usage(account_id, doc, default_limit=default_limit, now=now)
    today = window_start(now)
    stale = (doc or {}).get("windowStart") != today
    if usage.exhausted:
        update = {"windowStart": today, "usageToday": usage.usage_today} if stale else None
        return update, Reservation(account_id, False, usage.usage_today, usage.daily_limit)
    used = usage.usage_today + 1
    return (
        {"windowStart": today, "usageToday": used},
        Reservation(account_id, True, used, usage.daily_limit),
    )


def exhausted_fields(
    account_id: str, doc: Mapping[str, Any] | None, *, default_limit: int, now: datetime
) -> dict[str, Any]:
    """Fields that mark the account used up until the end of the UTC day (after a 429)."""
    usage = current_usage(account_id, doc, default_limit=default_limit, now=now)
    return {
        "windowStart": window_start(now),
        "usageToday": max(usage.usage_today, usage.daily_limit),
    }


def least_used_first(usages: list[AccountUsage]) -> list[AccountUsage]:
    """Accounts with quota left, least used first, ties by id: deterministic and spreading."""
    return sorted((u for u in usages if not u.exhausted), key=lambda u: (u.usage_today, u.account_id))
