"""Which accounts may send a layout chart, with which TradingView session, and the failures of
a chart no session can reach (core/chart_img/layout_sessions.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from worker_chart_export.core.chart_img.layout_sessions import LayoutAccess, layout_access, session_of
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.types import LayoutTarget

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=15)
ACCOUNTS = {"bare": None, "alice": "alice-tv", "bob": "bob-tv"}
CONFIGURED = ("alice-tv", "bob-tv", "shared-tv")


def test_a_shared_layout_goes_to_any_account() -> None:
    assert layout_access(LayoutTarget("37wLAGgd"), ACCOUNTS, CONFIGURED, {}, NOW) == LayoutAccess()


def test_a_private_layout_goes_only_to_accounts_with_a_session_not_set_aside() -> None:
    private = LayoutTarget("37wLAGgd", private=True)
    assert layout_access(private, ACCOUNTS, CONFIGURED, {}, NOW) == LayoutAccess(frozenset({"alice", "bob"}))
    aside = {"alice-tv": LATER}
    assert layout_access(private, ACCOUNTS, CONFIGURED, aside, NOW) == LayoutAccess(frozenset({"bob"}))
    # a set-aside that is over counts no more: the next chart probes the session
    assert layout_access(private, ACCOUNTS, CONFIGURED, {"alice-tv": NOW}, NOW).only == frozenset(
        {"alice", "bob"}
    )


def test_a_shared_layout_skips_an_account_whose_own_session_is_set_aside() -> None:
    access = layout_access(LayoutTarget("37wLAGgd"), ACCOUNTS, CONFIGURED, {"bob-tv": LATER}, NOW)
    assert access == LayoutAccess(frozenset({"bare", "alice"}))


def test_a_private_layout_without_any_session_is_refused_before_any_call() -> None:
    access = layout_access(LayoutTarget("OKyFXMzN", private=True), {"bare": None}, (), {}, NOW)
    assert access.only is None and access.refusal is not None
    assert access.refusal.code is ErrorCode.VALIDATION_FAILED
    assert not access.refusal.retryable
    assert access.refusal.details == {"errorKind": "layout_session_missing", "layoutId": "OKyFXMzN"}
    assert "OKyFXMzN is private" in access.refusal.message
    assert "no request was sent" in access.refusal.message


def test_a_template_naming_a_session_not_configured_is_refused() -> None:
    layout = LayoutTarget("OKyFXMzN", private=True, session="gone")
    refusal = layout_access(layout, ACCOUNTS, CONFIGURED, {}, NOW).refusal
    assert refusal is not None and refusal.code is ErrorCode.VALIDATION_FAILED
    assert "names a session that is not configured (sessions: alice-tv, bob-tv, shared-tv)" in (
        refusal.message
    )
    assert "gone" not in refusal.message and "gone" not in str(refusal.details)  # not vouched for


def test_a_template_session_set_aside_waits_retryable_naming_until_when() -> None:
    layout = LayoutTarget("OKyFXMzN", private=True, session="shared-tv")
    assert layout_access(layout, ACCOUNTS, CONFIGURED, {}, NOW) == LayoutAccess()
    refusal = layout_access(layout, ACCOUNTS, CONFIGURED, {"shared-tv": LATER}, NOW).refusal
    assert refusal is not None and refusal.code is ErrorCode.CHART_API_FAILED and refusal.retryable
    assert refusal.details["sessions"] == [
        {"session": "shared-tv", "setAsideUntil": "2026-11-22T10:15:00.000Z"}
    ]


def test_every_own_session_set_aside_waits_for_a_private_layout() -> None:
    aside = {"alice-tv": LATER, "bob-tv": LATER}
    refusal = layout_access(LayoutTarget("x1", private=True), ACCOUNTS, CONFIGURED, aside, NOW).refusal
    assert refusal is not None and refusal.retryable
    assert [s["session"] for s in refusal.details["sessions"]] == ["alice-tv", "bob-tv"]


def test_the_templates_session_wins_over_the_accounts_own() -> None:
    assert session_of(LayoutTarget("x1", session="shared-tv"), "alice-tv") == "shared-tv"
    assert session_of(LayoutTarget("x1"), "alice-tv") == "alice-tv"
    assert session_of(LayoutTarget("x1"), None) is None
