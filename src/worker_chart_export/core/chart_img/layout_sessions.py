"""Which TradingView session a layout chart goes with, which accounts may send it, and the
failures of a chart no session can reach, as pure rules (docs/design.md, "Layouts").

A session is named by its id, never held here: the values stay in the adapter that sends
them. The session of a layout chart is the one its template names (`layout.session`), else
the serving account's own (`session` in the accounts JSON), else none:
- a template that names a session: every account may send the chart with it, unless that
  session is not configured (refused before any call, VALIDATION_FAILED) or is set aside
  (no call now: a later attempt of the step may find it probed back, retryable);
- otherwise each account with a session sends its own, one whose session is set aside sends
  none of its layout charts meanwhile, and one without a session sends a shared layout bare.
  A private layout no account has a session for is refused before any call
  (VALIDATION_FAILED): a private layout without a session is never asked for.

A session CHART-IMG or TradingView no longer accepts (409 "Session Disconnected",
core/chart_img/answers.py) is set aside for `SET_ASIDE_SECONDS`, then the next chart sent
with it is its probe: rendered, it serves again; refused again, it is set aside again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from worker_chart_export.core.chart_img.set_aside import SET_ASIDE_SECONDS
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.types import LayoutTarget


@dataclass(frozen=True)
class LayoutAccess:
    """Where a layout chart may go now: `only` the accounts named (None: any account), or
    nowhere (`refusal`, the chart's failure, no call made)."""

    only: frozenset[str] | None = None
    refusal: StepError | None = None


def session_of(layout: LayoutTarget, account_session: str | None) -> str | None:
    """The session a layout chart is sent with from an account: the template's, else the
    account's own, else none."""
    return layout.session if layout.session is not None else account_session


def layout_access(
    layout: LayoutTarget,
    account_sessions: Mapping[str, str | None],
    configured: Collection[str],
    set_aside: Mapping[str, datetime],
    now: datetime,
) -> LayoutAccess:
    """Which accounts may send this layout chart now. `account_sessions`: each account's own
    session (None: it has none); `configured`: the sessions there are; `set_aside`: until
    when each session set aside is."""
    aside = {name: until for name, until in set_aside.items() if until > now}
    if layout.session is not None:
        if layout.session not in configured:
            return LayoutAccess(refusal=session_not_configured(layout, configured))
        if layout.session in aside:
            return LayoutAccess(refusal=sessions_set_aside(layout, {layout.session: aside[layout.session]}))
        return LayoutAccess()
    fit = {
        account
        for account, session in account_sessions.items()
        if (session is None and not layout.private) or (session is not None and session not in aside)
    }
    if fit:
        return LayoutAccess(None if len(fit) == len(account_sessions) else frozenset(fit))
    held = {s: aside[s] for s in account_sessions.values() if s is not None and s in aside}
    if held:
        return LayoutAccess(refusal=sessions_set_aside(layout, held))
    return LayoutAccess(refusal=session_missing(layout))


def set_aside_until(now: datetime, seconds: float = SET_ASIDE_SECONDS) -> datetime:
    """A session refused now is not sent again before this; then its next chart probes it."""
    return now + timedelta(seconds=seconds)


# --- the failures ----------------------------------------------------------------------------


def session_missing(layout: LayoutTarget) -> StepError:
    """A private layout with no session to reach it: refused before any call."""
    return StepError(
        ErrorCode.VALIDATION_FAILED,
        f"TradingView layout {layout.layout_id} is private and no TradingView session is configured "
        "for it: name one in the template's layout.session, or give the serving accounts one "
        "(session in the accounts JSON); no request was sent",
        {"errorKind": "layout_session_missing", "layoutId": layout.layout_id},
    )


def session_not_configured(layout: LayoutTarget, configured: Collection[str]) -> StepError:
    """The template names a session the worker does not have: refused before any call. The
    name is not repeated: one the worker does not know is no id it can vouch for (a session's
    value pasted there would travel to the run's document and the public manifest)."""
    there = ", ".join(sorted(configured)) or "none"
    return StepError(
        ErrorCode.VALIDATION_FAILED,
        f"the template of TradingView layout {layout.layout_id} names a session that is not "
        f"configured (sessions: {there}); no request was sent",
        {"errorKind": "layout_session_missing", "layoutId": layout.layout_id},
    )


def sessions_set_aside(layout: LayoutTarget, held: Mapping[str, datetime]) -> StepError:
    """Every session that could reach the layout is set aside (refused lately): no call now;
    a later attempt may find one probed back (retryable)."""
    said = ", ".join(f"{name} until {rfc3339_utc(until)}" for name, until in sorted(held.items()))
    return StepError(
        ErrorCode.CHART_API_FAILED,
        f"every TradingView session that could reach layout {layout.layout_id} was refused lately "
        f"and is set aside ({said}), then probed; no request was sent",
        {
            "errorKind": "session_set_aside",
            "layoutId": layout.layout_id,
            "sessions": [
                {"session": name, "setAsideUntil": rfc3339_utc(u)} for name, u in sorted(held.items())
            ],
        },
        retryable=True,
    )
