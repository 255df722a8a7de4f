"""`worker-chart-export accounts` as a table for a person: one row per account, the totals,
moments as "now" / "in 3 min" (the JSON output has them as RFC 3339)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from worker_chart_export.core.chart_img.account_status import AccountRow, LimitSource, QuotaReport
from worker_chart_export.core.naming import rfc3339_utc

HEADERS = ("ACCOUNT", "PLAN", "LIMIT", "USED", "LEFT", "GIVEN BACK", "NEXT SLOT", "STATE", "WHY")
_RIGHT = {"LIMIT", "USED", "LEFT", "GIVEN BACK"}  # numbers, aligned right
NOT_CONFIGURED = (
    "no accounts configured (--accounts-config-path, CHART_IMG_ACCOUNTS_JSON or CHART_IMG_ACCOUNTS_SECRET)"
)


def until(moment: datetime | None, now: datetime) -> str:
    """How far ahead `moment` is, the way a person reads it."""
    if moment is None:
        return "unknown"
    seconds = (moment - now).total_seconds()
    if seconds <= 0:
        return "now"
    if seconds < 10:
        return f"in {seconds:.1f} s"
    if seconds < 60:
        return f"in {seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"in {minutes} min" if minutes < 60 else f"in {minutes // 60} h {minutes % 60:02d} min"


def _why(row: AccountRow, now: datetime) -> str:
    parts = []
    if row.disabled_reason:
        parts.append(row.disabled_reason + _set_aside_until(row.disabled_until))
    if row.exhausted_reason:
        parts.append(f"{row.exhausted_reason} (until {rfc3339_utc(row.exhausted_until or now)})")
    if row.cooling_until and row.cooling_reason:
        parts.append(row.cooling_reason + _set_aside_until(row.cooling_until))
    elif row.cooling_until:
        parts.append(f"cooling down until {rfc3339_utc(row.cooling_until)}")
    if row.limit_source is LimitSource.DOCUMENT:
        parts.append("limit set by the usage document")
    return "; ".join(parts)


def _set_aside_until(until: datetime | None) -> str:
    """Which rule's set-aside ends when: then one probe call decides."""
    if until is None:
        return " (until 00:00 UTC)"
    return f" (set aside until {rfc3339_utc(until)}, then one probe call decides)"


def _cells(row: AccountRow, now: datetime) -> tuple[str, ...]:
    def number(value: int | None) -> str:
        return "?" if value is None else str(value)

    return (
        row.account_id,
        row.plan or ("-" if row.configured else "?"),
        number(row.daily_limit),
        str(row.used_today),
        number(row.left_today),
        str(row.refunded_today),
        "-" if row.disabled and row.next_slot is None else until(row.next_slot, now),
        row.state.value,
        _why(row, now),
    )


def _lines(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if header in _RIGHT else cell.ljust(width)
            for header, cell, width in zip(HEADERS, row, widths, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _total_line(report: QuotaReport) -> str:
    totals, now = report.totals, report.now
    line = f"total: {totals.accounts} account(s), {totals.usable} usable, {totals.used_today} used today"
    if totals.refunded_today:
        line += f" ({totals.refunded_today} given back: calls that never reached CHART-IMG)"
    if totals.unknown_limits == totals.accounts:
        line += ", daily limits unknown"
    else:
        unknown = (
            f" (and {totals.unknown_limits} account(s) of unknown limit)" if totals.unknown_limits else ""
        )
        line += f" of {totals.daily_limit}: {totals.left_today} left today{unknown}"
    return f"{line}; the UTC day ends {until(totals.resets_at, now)} ({rfc3339_utc(totals.resets_at)})"


def render_table(report: QuotaReport, source: str, *, configured: bool) -> str:
    now = report.now
    lines = [f"CHART-IMG accounts at {rfc3339_utc(now)}, usage from {source}"]
    if not report.rows:  # rows come from the configuration, else from the usage documents
        lines.append(f"{NOT_CONFIGURED} and no usage document there: nothing to show")
        return "\n".join(lines)
    if not configured:
        lines.append(
            f"{NOT_CONFIGURED}: the accounts below are the usage documents', plan and pacing unknown"
        )
    lines += _lines([HEADERS, *(_cells(row, now) for row in report.rows)])
    lines.append(_total_line(report))
    if report.unconfigured:
        lines.append(f"usage documents of accounts not configured: {', '.join(report.unconfigured)}")
    return "\n".join(lines)
