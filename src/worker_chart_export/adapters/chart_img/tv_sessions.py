"""The TradingView sessions this process holds (and a layout call's timeout), and what
CHART-IMG said of each: which
accounts may send a layout chart now and with which session (the rules:
core/chart_img/layout_sessions.py), a session set aside when it was refused (one ERROR naming
the layout and the session's id, never its value), and served again once a chart sent with
it after its set-aside renders (its probe).

The set-aside is this process's: every instance finds a refused session out by itself, at the
cost of one call each per set-aside (docs/design.md, "Layouts"). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from datetime import datetime

from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.chart_img.sessions_config import SessionConfig
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.layout_sessions import (
    LayoutAccess,
    layout_access,
    session_of,
    set_aside_until,
)
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.limits import LAYOUT_CALL_SECONDS
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.types import ChartCall
from worker_chart_export.logs import get_logger

ANY_ACCOUNT = LayoutAccess()


class TradingViewSessions:
    """The configured sessions by id, each account's own, and those set aside until when."""

    def __init__(
        self,
        sessions: Sequence[SessionConfig],
        accounts: Sequence[AccountConfig],
        *,
        clock: Clock,
        timeout: float = LAYOUT_CALL_SECONDS,
    ) -> None:
        self.timeout = timeout  # one layout call's (CHART_IMG_LAYOUT_TIMEOUT_SECONDS)
        self._sessions = {session.id: session for session in sessions}
        self._account_sessions = {account.id: account.session for account in accounts}
        self._clock = clock
        self._lock = threading.Lock()
        self._set_aside: dict[str, datetime] = {}  # until then no chart goes with it; then a probe

    @property
    def configured(self) -> tuple[str, ...]:
        return tuple(self._sessions)

    def access(self, call: ChartCall, serving: Collection[str]) -> LayoutAccess:
        """Where `call` may go now: any account (an Advanced Chart, or a layout any account
        can send), only some (`only`), or nowhere (`refusal`: its failure, no call made).
        `serving`: the accounts whose plan serves the call; only their sessions count."""
        if call.layout is None:
            return ANY_ACCOUNT
        with self._lock:
            aside = dict(self._set_aside)
        sessions = {a: s for a, s in self._account_sessions.items() if a in serving}
        return layout_access(call.layout, sessions, self._sessions, aside, self._clock.now())

    def for_call(self, call: ChartCall, account_id: str) -> SessionConfig | None:
        """The session `call` is sent with from `account_id` (None: no session headers)."""
        if call.layout is None:
            return None
        name = session_of(call.layout, self._account_sessions.get(account_id))
        return None if name is None else self._sessions[name]

    def refused(self, session: str, call: ChartCall, answer: Answer) -> None:
        """CHART-IMG refused the session (409): set aside now, with one ERROR; already set
        aside, the answer is to a chart sent before that and adds nothing. Refused on its
        probe (its set-aside over), it is set aside again."""
        now = self._clock.now()
        with self._lock:
            already = self._set_aside.get(session)
            if already is not None and already > now:
                return
            until = self._set_aside[session] = set_aside_until(now)
        assert call.layout is not None
        get_logger().error(
            "tradingview session refused: set aside, then probed",
            error={"code": "CHART_API_SESSION_REFUSED"},
            session=session,
            layoutId=call.layout.layout_id,
            runId=call.run_id,
            stepId=call.step_id,
            chartTemplateId=call.chart_template_id,
            setAsideUntil=rfc3339_utc(until),
            answer={"httpStatus": answer.status, "message": answer.message},
        )

    def served(self, session: str) -> None:
        """A chart sent with the session rendered: it serves (again, when it was set aside:
        its probe, or an answer to a chart sent before)."""
        with self._lock:
            if self._set_aside.pop(session, None) is None:
                return
        get_logger().info("tradingview session serves again: its probe rendered", session=session)
