"""core/chart_img/account_status.py: one account's row from its usage document, its configuration and the
time, and the totals. The documents are made by the worker's own writers (core/chart_img/usage.py's
reserve_one, reserve_many and exhausted_fields) wherever the worker writes them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.chart_img.account_status import (
    DAILY_LIMIT_REACHED,
    KEY_REFUSED,
    AccountState,
    ConfiguredAccount,
    LimitSource,
    account_row,
    quota_report,
    report_dict,
    row_dict,
)
from worker_chart_export.core.chart_img.plans import PLANS, AccountLimits
from worker_chart_export.core.chart_img.usage import (
    Pacing,
    ReservationRequest,
    ReservationTime,
    exhausted_fields,
    reserve_many,
    reserve_one,
)
from worker_chart_export.core.naming import moment_of

NOW = datetime(2026, 11, 23, 18, 30, 0, tzinfo=UTC)
TODAY = "2026-11-23T00:00:00Z"
YESTERDAY = "2026-11-22T00:00:00Z"
MIDNIGHT = datetime(2026, 11, 24, tzinfo=UTC)
BASIC_PACING = Pacing(0.9, 3, 0.3)  # as the worker paces BASIC (account_views.PacingMargins)


def configured(account_id: str = "acc1", plan: str = "BASIC", **limits: Any) -> ConfiguredAccount:
    named = PLANS[plan]
    values = AccountLimits(named.daily_limit, named.rate_per_second, named.burst)
    values = AccountLimits(**{**values.__dict__, **limits})
    source = LimitSource.ACCOUNT if "daily_limit" in limits else LimitSource.PLAN
    return ConfiguredAccount(account_id, plan, values, source, BASIC_PACING)


def used(count: int, *, window: str = TODAY, **fields: Any) -> dict[str, Any]:
    return {"usageToday": count, "windowStart": window, **fields}


def reserved(count: int, pacing: Pacing = BASIC_PACING, at: datetime = NOW) -> dict[str, Any]:
    """The document after `count` reservations at `at`, as the worker's store writes it."""
    update, _ = reserve_many(ReservationRequest("acc1", count, 50, pacing), None, ReservationTime(at))
    assert update is not None
    return update


def test_a_fresh_day_shows_what_is_used_and_left() -> None:
    row = account_row("acc1", used(12), configured(), NOW)
    assert (row.plan, row.daily_limit, row.limit_source) == ("BASIC", 50, LimitSource.PLAN)
    assert (row.used_today, row.left_today, row.state, row.next_slot) == (12, 38, AccountState.FREE, NOW)
    assert (row.exhausted_until, row.cooling_until, row.disabled) == (None, None, False)


def test_an_account_without_a_document_has_its_whole_day() -> None:
    row = account_row("acc1", None, configured(), NOW)
    assert (row.used_today, row.left_today, row.state, row.next_slot) == (0, 50, AccountState.FREE, NOW)


def test_a_window_of_an_older_day_counts_as_nothing_used() -> None:
    stale = used(50, window=YESTERDAY, exhaustedUntil=NOW.replace(hour=0))  # yesterday's exhaustion
    row = account_row("acc1", stale, configured(), NOW)
    assert (row.used_today, row.left_today, row.state) == (0, 50, AccountState.FREE)
    assert row.exhausted_until is None and row.exhausted_reason is None


def test_an_account_at_its_limit_is_exhausted_until_utc_midnight() -> None:
    row = account_row("acc1", used(50), configured(), NOW)
    assert (row.used_today, row.left_today, row.state) == (50, 0, AccountState.EXHAUSTED)
    assert (row.exhausted_until, row.exhausted_reason, row.next_slot) == (
        MIDNIGHT,
        DAILY_LIMIT_REACHED,
        MIDNIGHT,
    )


def test_an_account_the_provider_exhausted_shows_nothing_left() -> None:
    """What the worker writes after CHART-IMG's quota answer, below our own count."""
    doc = {**used(7), **exhausted_fields(used(7), now=NOW)}
    row = account_row("acc1", doc, configured(), NOW)
    assert (row.left_today, row.state, row.exhausted_until) == (0, AccountState.EXHAUSTED, MIDNIGHT)


def test_a_recorded_provider_exhaustion_is_shown_with_its_reason() -> None:
    doc = used(7, exhaustedUntil=MIDNIGHT, exhaustedReason="429 Limit Exceeded")
    row = account_row("acc1", doc, configured(), NOW)
    assert (row.used_today, row.left_today, row.state) == (7, 0, AccountState.EXHAUSTED)
    assert (row.exhausted_until, row.exhausted_reason) == (MIDNIGHT, "429 Limit Exceeded")


def test_a_paced_account_shows_the_slot_its_next_reservation_would_get() -> None:
    """By hand: paced at 0.9/s, one slot every T = 1.111 s; a burst of 3 banks (3 - 1) x T
    minus the 0.3 s arrival jitter = 1.922 s. Five sends at NOW leave tat = NOW + 5T =
    NOW + 5.556 s, so the sixth may go at tat - 1.922 s = NOW + 3.633 s."""
    doc = used(5, tat=NOW.timestamp() + 5.5556)
    assert reserved(5)["tat"] == pytest.approx(doc["tat"], abs=1e-3)  # the worker writes that tat
    row = account_row("acc1", doc, configured(), NOW)
    assert row.state is AccountState.PACED and row.next_slot is not None
    assert (row.next_slot - NOW).total_seconds() == pytest.approx(3.633, abs=1e-3)


@given(
    count=st.integers(min_value=0, max_value=30),
    later=st.floats(min_value=0, max_value=40),
    rate=st.sampled_from([0.9, 9.0, 31.5]),
    burst=st.integers(min_value=1, max_value=50),
)
def test_the_next_slot_is_always_the_one_the_worker_would_get(
    count: int, later: float, rate: float, burst: int
) -> None:
    pacing = Pacing(rate, burst, 0.3)
    account = ConfiguredAccount("acc1", None, AccountLimits(1000, rate, burst), LimitSource.DEFAULT, pacing)
    doc = reserved(count, pacing) if count else None
    at = NOW + timedelta(seconds=later)
    row = account_row("acc1", doc, account, at)
    _, reservation = reserve_one("acc1", doc, default_limit=1000, pacing=pacing, at=ReservationTime(at))
    assert row.next_slot is not None and reservation.send_at is not None
    assert (row.next_slot - reservation.send_at).total_seconds() == pytest.approx(0.0, abs=1e-3)
    assert (row.state is AccountState.PACED) == (reservation.send_at > at)


def test_the_documents_daily_limit_overrides_the_configuration() -> None:
    row = account_row("acc1", used(3, dailyLimit=5), configured(daily_limit=40), NOW)
    assert (row.daily_limit, row.limit_source, row.left_today) == (5, LimitSource.DOCUMENT, 2)
    assert account_row("acc1", used(3), configured(daily_limit=40), NOW).limit_source is LimitSource.ACCOUNT


def test_a_key_parked_by_a_document_limit_of_zero_is_exhausted() -> None:
    row = account_row("acc1", used(0, dailyLimit=0), configured(), NOW)
    assert (row.daily_limit, row.left_today, row.state) == (0, 0, AccountState.EXHAUSTED)


def test_a_recorded_reason_is_trimmed_and_bounded() -> None:
    doc = used(3, disabled=True, disabledReason="  " + "x" * 500 + " ")
    assert account_row("acc1", doc, configured(), NOW).disabled_reason == "x" * 200
    blank = used(3, disabled=True, disabledReason="   ")
    assert account_row("acc1", blank, configured(), NOW).disabled_reason == KEY_REFUSED


def test_a_cooling_key_waits_for_its_cooldown() -> None:
    until = NOW + timedelta(seconds=20)
    row = account_row("acc1", used(3, coolUntil=until.timestamp()), configured(), NOW)
    assert (row.state, row.cooling_until, row.next_slot, row.left_today) == (
        AccountState.COOLING,
        until,
        until,
        47,
    )
    over = account_row("acc1", used(3, coolUntil=(NOW - timedelta(seconds=1)).timestamp()), configured(), NOW)
    assert (over.state, over.cooling_until) == (AccountState.FREE, None)


def test_a_disabled_key_says_why_and_leaves_the_days_capacity() -> None:
    refused = account_row("acc2", used(3, disabled=True, disabledReason="401 twice"), configured("acc2"), NOW)
    assert (refused.state, refused.disabled_reason, refused.next_slot) == (
        AccountState.DISABLED,
        "401 twice",
        None,
    )
    unexplained = account_row("acc2", used(3, disabled=True), configured("acc2"), NOW)
    assert unexplained.disabled_reason == KEY_REFUSED
    report = quota_report([configured("acc1"), configured("acc2")], {"acc2": used(3, disabled=True)}, NOW)
    assert (report.totals.left_today, report.totals.usable, report.totals.used_today) == (50, 1, 3)


def test_a_key_disabled_an_older_day_is_shown_as_the_worker_will_try_it() -> None:
    row = account_row("acc2", used(3, window=YESTERDAY, disabled=True, disabledReason="x"), configured(), NOW)
    assert (row.state, row.disabled, row.disabled_reason, row.left_today) == (
        AccountState.FREE,
        False,
        None,
        50,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"coolUntil": "soon"},
        {"coolUntil": True},
        {"disabled": "yes"},
        {"exhaustedUntil": 1e30},
        {"dailyLimit": -1},
        {"dailyLimit": "5"},
        {"usageToday": "12"},
    ],
    ids=repr,
)
def test_malformed_fields_are_ignored(fields: dict[str, Any]) -> None:
    row = account_row("acc1", {**used(0), **fields}, configured(), NOW)
    assert (row.state, row.daily_limit, row.left_today) == (AccountState.FREE, 50, 50)


@pytest.mark.parametrize(
    ("value", "moment"),
    [
        (datetime(2026, 11, 23, 19, 0, tzinfo=UTC), datetime(2026, 11, 23, 19, 0, tzinfo=UTC)),
        (datetime(2026, 11, 23, 19, 0), datetime(2026, 11, 23, 19, 0, tzinfo=UTC)),  # naive: UTC
        (NOW.timestamp(), NOW),
        ("2026-11-23T18:30:00Z", NOW),
        ("2026-11-23T19:30:00+01:00", NOW),
        ("tomorrow", None),
        (None, None),
        (False, None),
    ],
)
def test_moments_are_read_in_each_shape_a_store_keeps(value: Any, moment: datetime | None) -> None:
    assert moment_of(value) == moment


def test_without_configuration_every_document_is_listed_plan_unknown() -> None:
    docs = {
        "zeta": used(2, dailyLimit=10),
        "alpha": used(4, tat=NOW.timestamp() + 5),
        "beta": used(1, tat=NOW.timestamp() - 5),
    }
    report = quota_report([], docs, NOW)
    assert [r.account_id for r in report.rows] == ["alpha", "beta", "zeta"]
    alpha, beta, zeta = report.rows
    assert (alpha.plan, alpha.daily_limit, alpha.left_today, alpha.configured) == (None, None, None, False)
    assert (alpha.state, alpha.next_slot) == (AccountState.PACED, None)  # the burst is unknown
    assert (beta.state, beta.next_slot) == (AccountState.FREE, NOW)  # past `tat`: any burst sends now
    assert (zeta.daily_limit, zeta.left_today) == (10, 8)
    assert (report.totals.unknown_limits, report.totals.left_today, report.totals.daily_limit) == (2, 8, 10)


def test_the_totals_are_the_days_remaining_capacity_over_all_keys() -> None:
    accounts = [configured("acc1"), configured("acc2", "PRO"), configured("acc3")]
    docs = {"acc1": used(12), "acc2": used(500), "gone": used(9)}
    report = quota_report(accounts, docs, NOW)
    assert [r.account_id for r in report.rows] == ["acc1", "acc2", "acc3"]  # the configured order
    totals = report.totals
    assert (totals.accounts, totals.usable, totals.daily_limit) == (3, 2, 600)
    assert (totals.used_today, totals.left_today, totals.resets_at) == (512, 38 + 50, MIDNIGHT)
    assert report.unconfigured == ("gone",)


def test_the_json_form_names_every_field_and_no_key() -> None:
    report = quota_report([configured()], {"acc1": {**used(50), "refundedToday": 2}}, NOW)
    data = report_dict(report)
    [row] = data["accounts"]
    assert row == {
        "accountId": "acc1",
        "configured": True,
        "plan": "BASIC",
        "dailyLimit": 50,
        "dailyLimitFrom": "plan",
        "usedToday": 50,
        "leftToday": 0,
        "refundedToday": 2,
        "nextSlot": "2026-11-24T00:00:00.000Z",
        "state": "exhausted",
        "coolingUntil": None,
        "coolingReason": None,
        "exhaustedUntil": "2026-11-24T00:00:00.000Z",
        "exhaustedReason": DAILY_LIMIT_REACHED,
        "disabled": False,
        "disabledReason": None,
        "disabledUntil": None,
    }
    assert data["totals"] == {
        "accounts": 1,
        "usable": 0,
        "dailyLimit": 50,
        "usedToday": 50,
        "refundedToday": 2,
        "leftToday": 0,
        "unknownLimits": 0,
        "resetsAt": "2026-11-24T00:00:00.000Z",
    }
    assert (data["now"], data["unconfigured"]) == ("2026-11-23T18:30:00.000Z", [])


def test_moments_are_read_as_utc_whatever_the_machines_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert moment_of(datetime(2026, 11, 23, 18, 30)) == NOW  # no offset: UTC, not the machine's
        aware = moment_of(datetime(2026, 11, 23, 20, 30, tzinfo=timezone(timedelta(hours=2))))
        assert aware == NOW and aware is not None and aware.tzinfo is UTC
    finally:
        monkeypatch.undo()
        time.tzset()
    assert moment_of("2026-11-23T18:30:00z") is None  # ISO 8601's Z is upper case


def test_a_moment_exactly_now_is_over() -> None:
    row = account_row("acc1", used(1, coolUntil=NOW, exhaustedUntil=NOW), configured(), NOW)
    assert row.cooling_until is None and row.exhausted_until is None and row.state is AccountState.FREE


def test_an_unconfigured_account_whose_pacing_state_is_now_may_send_now() -> None:
    row = account_row("acc1", used(1, tat=NOW.timestamp()), None, NOW)
    assert row.next_slot == NOW and row.state is AccountState.FREE


def test_a_document_limit_of_zero_adds_nothing_to_the_total() -> None:
    report = quota_report([configured("a"), configured("b")], {"a": used(0, dailyLimit=0), "b": None}, NOW)
    assert report.totals.daily_limit == PLANS["BASIC"].daily_limit


def test_without_configuration_nothing_is_unconfigured_and_rows_say_what_is_unknown() -> None:
    report = quota_report([], {"x": used(2, coolUntil=NOW + timedelta(seconds=5))}, NOW)
    assert report.unconfigured == ()
    (row,) = report_dict(report)["accounts"]
    assert row["dailyLimit"] is None and row["dailyLimitFrom"] is None
    assert row["coolingUntil"] == "2026-11-23T18:30:05.000Z"


def test_a_key_set_aside_says_which_rule_and_until_when_then_a_probe() -> None:
    until = "2026-11-23T18:40:00.000Z"
    cooling = account_row("acc1", used(3, coolUntil=until, coolReason="429 streak: x"), configured(), NOW)
    assert (cooling.state, cooling.cooling_reason, cooling.cooling_until) == (
        AccountState.COOLING,
        "429 streak: x",
        NOW + timedelta(minutes=10),
    )
    over = account_row(
        "acc1", used(3, coolUntil="2026-11-23T18:00:00.000Z", coolReason="429 streak: x"), configured(), NOW
    )
    assert (over.state, over.cooling_reason) == (AccountState.FREE, None)  # its probe's turn
    disabled = account_row(
        "acc1", used(3, disabled=True, disabledUntil=until, disabledReason="r"), configured(), NOW
    )
    assert (disabled.state, disabled.disabled_until, disabled.next_slot) == (
        AccountState.DISABLED,
        NOW + timedelta(minutes=10),
        NOW + timedelta(minutes=10),  # the probe's moment
    )
    data = row_dict(disabled)
    assert (data["disabledUntil"], data["coolingReason"]) == (until, None)
    assert row_dict(cooling)["coolingReason"] == "429 streak: x"
    day_long = account_row("acc1", used(3, disabled=True), configured(), NOW)  # an older worker's
    assert (day_long.disabled_until, day_long.next_slot) == (None, None)


def test_a_disabling_of_an_older_window_is_over_though_its_moment_is_still_ahead() -> None:
    """Disabled at 23:55 until 00:10: at 00:05 the new day tries the key again (as the worker's
    reservations do), so no moment is shown for it."""
    doc = used(3, window=YESTERDAY, disabled=True, disabledUntil="2026-11-23T18:40:00.000Z")
    row = account_row("acc1", doc, configured(), NOW)
    assert (row.disabled, row.disabled_until, row.state) == (False, None, AccountState.FREE)
