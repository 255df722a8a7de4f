"""What each CHART-IMG account has left today, from its usage document, its configuration and
the time: the rows and totals `worker-chart-export accounts` shows. Pure: plain values in,
plain values out; it never sees a key (it is given limits and pacing).

The usage document `chart_img_accounts_usage/{accountId}` (core/chart_img/usage.py) holds the day's
window (`windowStart`, `usageToday`), an optional `dailyLimit` that overrides the configured
one, and the pacing state `tat`. It may also record what CHART-IMG said about the key, when a
store persists it; those fields are read when present (and ignored when malformed):

| field | meaning |
|---|---|
| `coolUntil`, `coolReason` | set aside by the 429 streak rule: no call till then, a probe |
| `exhaustedUntil`, `exhaustedReason` | CHART-IMG refused the day's quota: nothing left until then |
| `disabled`, `disabledUntil`, `disabledReason` | key refused for two requests: unused till then, a probe |
| `refundedToday` | units given back today: calls that never reached CHART-IMG (already off `usageToday`) |

A moment may be a timestamp (Firestore's), epoch seconds (as `tat`) or an ISO-8601 string (a
JSON file): `core.chart_img.set_aside.moment_of`. A window of an older UTC day counts as nothing used
(`core.chart_img.usage.usage_today`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from worker_chart_export.core.chart_img.plans import AccountLimits
from worker_chart_export.core.chart_img.set_aside import (
    COOL_REASON,
    COOL_UNTIL,
    DISABLED_REASON,
    DISABLED_UNTIL,
)
from worker_chart_export.core.chart_img.usage import (
    EXHAUSTED_REASON,
    EXHAUSTED_UNTIL,
    QUOTA_REFUSED,
    Pacing,
    daily_limit_of,
    disabled_now,
    next_utc_midnight,
    refunded_today,
    tat_of,
    usage_today,
)
from worker_chart_export.core.naming import moment_of, rfc3339_utc

DAILY_LIMIT_REACHED = "daily limit used up"  # by our count, or CHART-IMG said so (mark_exhausted)
KEY_REFUSED = "key refused by CHART-IMG"


class LimitSource(StrEnum):
    """Where an account's daily limit comes from, strongest first."""

    DOCUMENT = "document"  # the usage document's `dailyLimit`
    ACCOUNT = "account"  # the account's own `dailyLimit` in the accounts configuration
    PLAN = "plan"  # the account's `plan`
    DEFAULT = "default"  # CHART_IMG_DAILY_LIMIT


class AccountState(StrEnum):
    """What the next request on the account would meet, worst first."""

    DISABLED = "disabled"
    EXHAUSTED = "exhausted"
    COOLING = "cooling"
    PACED = "paced"  # its next send slot is ahead
    FREE = "free"


@dataclass(frozen=True)
class ConfiguredAccount:
    """An account as the worker is configured with it: its limits and the pacing it sends at."""

    account_id: str
    plan: str | None
    limits: AccountLimits
    limit_source: LimitSource
    pacing: Pacing


@dataclass(frozen=True)
class AccountRow:
    account_id: str
    configured: bool
    plan: str | None
    daily_limit: int | None  # None: neither the document nor a configuration says
    limit_source: LimitSource | None
    used_today: int
    left_today: int | None
    next_slot: datetime | None  # when a request could leave; None: unknown (pacing unknown)
    refunded_today: int  # units given back today (calls that never left), not in used_today
    cooling_until: datetime | None
    cooling_reason: str | None  # why it is set aside (the 429 streak rule), when the store says
    exhausted_until: datetime | None
    exhausted_reason: str | None
    disabled: bool
    disabled_reason: str | None
    disabled_until: datetime | None  # then one probe call; None: the rest of the UTC day
    state: AccountState


@dataclass(frozen=True)
class QuotaTotals:
    accounts: int
    usable: int  # neither disabled nor exhausted
    daily_limit: int  # over the accounts whose limit is known
    used_today: int
    refunded_today: int  # units given back today: calls that never reached CHART-IMG
    left_today: int  # the day's remaining capacity: units left on keys not disabled
    unknown_limits: int  # accounts whose limit is unknown (not in the sums above)
    resets_at: datetime  # the next UTC midnight


@dataclass(frozen=True)
class QuotaReport:
    now: datetime
    rows: tuple[AccountRow, ...]
    totals: QuotaTotals
    unconfigured: tuple[str, ...]  # usage documents of accounts the configuration does not list


def _ahead(doc: Mapping[str, Any], field: str, now: datetime) -> datetime | None:
    moment = moment_of(doc.get(field))
    return moment if moment is not None and moment > now else None


def _text(doc: Mapping[str, Any], field: str) -> str | None:
    value = doc.get(field)
    return (value.strip()[:200] or None) if isinstance(value, str) else None


def _send_slot(doc: Mapping[str, Any], pacing: Pacing | None, now: datetime) -> datetime | None:
    """When the worker would send a request arriving now, by the shared pacing state."""
    tat = tat_of(doc)
    moment = now.timestamp()
    if tat is None or tat <= moment:
        return now  # whatever the burst, a request arriving after `tat` goes at once
    if pacing is None:
        return None
    return datetime.fromtimestamp(pacing.send_time(tat, moment), UTC)


def _next_slot(
    slot: datetime | None, cooling_until: datetime | None, exhausted_until: datetime | None
) -> datetime | None:
    """The latest of the send slot, the cooldown and the day's exhaustion. The slot is only
    unknown while `tat` is ahead (seconds): the end of an exhaustion (the day) is later."""
    if slot is None:
        return exhausted_until
    return max(m for m in (slot, cooling_until, exhausted_until) if m is not None)


def _exhaustion(
    doc: Mapping[str, Any], used: int, limit: int | None, now: datetime
) -> tuple[datetime | None, str | None]:
    """(until when, why) the account has nothing left today, or (None, None)."""
    until = _ahead(doc, EXHAUSTED_UNTIL, now)
    if until is not None:
        return until, _text(doc, EXHAUSTED_REASON) or QUOTA_REFUSED
    if limit is not None and used >= limit:
        return next_utc_midnight(now), DAILY_LIMIT_REACHED
    return None, None


def _limit(
    doc: Mapping[str, Any], account: ConfiguredAccount | None
) -> tuple[int | None, LimitSource | None]:
    from_document = daily_limit_of(doc, -1)  # the worker's own reading of the override
    if from_document >= 0:
        return from_document, LimitSource.DOCUMENT
    if account is None:
        return None, None
    return account.limits.daily_limit, account.limit_source


def account_row(
    account_id: str,
    doc: Mapping[str, Any] | None,
    account: ConfiguredAccount | None,
    now: datetime,
) -> AccountRow:
    """One account's row: `doc` its usage document (None: none yet), `account` its
    configuration (None: not configured, so plan and pacing unknown)."""
    doc = doc or {}
    used = usage_today(doc, now)
    limit, source = _limit(doc, account)
    exhausted_until, exhausted_reason = _exhaustion(doc, used, limit, now)
    disabled = disabled_now(doc, now)  # as the worker reads it: until disabledUntil, or the day
    disabled_until = _ahead(doc, DISABLED_UNTIL, now) if disabled else None
    cooling_until = _ahead(doc, COOL_UNTIL, now)
    slot = _send_slot(doc, account.pacing if account else None, now)
    next_slot = _next_slot(slot, cooling_until, exhausted_until) if not disabled else disabled_until
    if disabled:
        state = AccountState.DISABLED
    elif exhausted_until is not None:
        state = AccountState.EXHAUSTED
    elif cooling_until is not None:
        state = AccountState.COOLING
    else:
        state = AccountState.PACED if slot is None or slot > now else AccountState.FREE
    left = 0 if exhausted_until else None if limit is None else max(0, limit - used)
    return AccountRow(
        account_id=account_id,
        configured=account is not None,
        plan=account.plan if account else None,
        daily_limit=limit,
        limit_source=source,
        used_today=used,
        left_today=left,
        next_slot=next_slot,
        refunded_today=refunded_today(doc, now),
        cooling_until=cooling_until,
        cooling_reason=_text(doc, COOL_REASON) if cooling_until else None,
        exhausted_until=exhausted_until,
        exhausted_reason=exhausted_reason,
        disabled=disabled,
        disabled_reason=(_text(doc, DISABLED_REASON) or KEY_REFUSED) if disabled else None,
        disabled_until=disabled_until,
        state=state,
    )


def totals_of(rows: Sequence[AccountRow], now: datetime) -> QuotaTotals:
    known = [r for r in rows if r.daily_limit is not None]
    return QuotaTotals(
        accounts=len(rows),
        usable=sum(r.state not in (AccountState.DISABLED, AccountState.EXHAUSTED) for r in rows),
        daily_limit=sum(r.daily_limit or 0 for r in known),
        used_today=sum(r.used_today for r in rows),
        refunded_today=sum(r.refunded_today for r in rows),
        left_today=sum(r.left_today or 0 for r in known if not r.disabled),
        unknown_limits=len(rows) - len(known),
        resets_at=next_utc_midnight(now),
    )


def quota_report(
    accounts: Sequence[ConfiguredAccount],
    docs: Mapping[str, Mapping[str, Any] | None],
    now: datetime,
) -> QuotaReport:
    """Every configured account, in its configured order; with no configuration, every
    usage document by id (plan and pacing unknown)."""
    if accounts:
        rows = tuple(account_row(a.account_id, docs.get(a.account_id), a, now) for a in accounts)
        listed = {a.account_id for a in accounts}
        unconfigured = tuple(sorted(set(docs) - listed))
    else:
        rows = tuple(account_row(account_id, docs[account_id], None, now) for account_id in sorted(docs))
        unconfigured = ()
    return QuotaReport(now, rows, totals_of(rows, now), unconfigured)


def _moment(value: datetime | None) -> str | None:
    return None if value is None else rfc3339_utc(value)


def row_dict(row: AccountRow) -> dict[str, Any]:
    """A row as JSON-ready plain values (camelCase, moments as RFC 3339 UTC)."""
    return {
        "accountId": row.account_id,
        "configured": row.configured,
        "plan": row.plan,
        "dailyLimit": row.daily_limit,
        "dailyLimitFrom": row.limit_source.value if row.limit_source else None,
        "usedToday": row.used_today,
        "leftToday": row.left_today,
        "refundedToday": row.refunded_today,
        "nextSlot": _moment(row.next_slot),
        "state": row.state.value,
        "coolingUntil": _moment(row.cooling_until),
        "coolingReason": row.cooling_reason,
        "exhaustedUntil": _moment(row.exhausted_until),
        "exhaustedReason": row.exhausted_reason,
        "disabled": row.disabled,
        "disabledReason": row.disabled_reason,
        "disabledUntil": _moment(row.disabled_until),
    }


def report_dict(report: QuotaReport) -> dict[str, Any]:
    totals = report.totals
    return {
        "now": rfc3339_utc(report.now),
        "accounts": [row_dict(row) for row in report.rows],
        "totals": {
            "accounts": totals.accounts,
            "usable": totals.usable,
            "dailyLimit": totals.daily_limit,
            "usedToday": totals.used_today,
            "refundedToday": totals.refunded_today,
            "leftToday": totals.left_today,
            "unknownLimits": totals.unknown_limits,
            "resetsAt": rfc3339_utc(totals.resets_at),
        },
        "unconfigured": list(report.unconfigured),
    }
