"""core/chart_img/usage.py: the daily window, and the pacing: what a reservation says about when its
request may leave.

The property test checks the claim docs/scaling.md relies on: requests sent anywhere between
their reservation's `send_at` and the moment it counted (its `now` plus `send_delay`), in any
order across instances, never exceed CHART-IMG's bucket (b + elapsed/T in any interval).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker_chart_export.core.chart_img.usage import (
    Pacing,
    Refund,
    ReservationRequest,
    ReservationTime,
    daily_limit_of,
    disabled_fields,
    disabled_now,
    exhausted_fields,
    exhausted_now,
    next_utc_midnight,
    refund_one,
    refunded_today,
    reserve_many,
    reserve_one,
    window_start,
)
from worker_chart_export.core.types import Reservation, ReservationRefusal

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
BASIC = Pacing(rate_per_second=1.0, burst=3)
TIME_GRAIN = 1e-5


def reserve(doc: dict[str, Any] | None, now: datetime, delay: float, pacing: Pacing = BASIC) -> Any:
    return reserve_one(
        "acc", doc, default_limit=1000, pacing=pacing, at=ReservationTime(now, send_delay=delay)
    )


def test_an_account_with_room_sends_at_once_and_counts_the_commit() -> None:
    update, reservation = reserve(None, NOW, delay=0.05)
    assert reservation.send_at == NOW  # no wait for the commit estimate
    assert update is not None and update["tat"] == NOW.timestamp() + 0.05 + 1.0


def test_a_paced_account_waits_for_its_slot() -> None:
    doc = {"tat": NOW.timestamp() + 5.0, "windowStart": "2026-11-23T00:00:00Z", "usageToday": 1}
    update, reservation = reserve(doc, NOW, delay=0.05)
    assert reservation.send_at == NOW + timedelta(seconds=5.0 - BASIC.tolerance)
    assert update is not None and update["tat"] == NOW.timestamp() + 6.0


@st.composite
def schedules(draw: Any, paced: Pacing | None = None) -> tuple[Pacing, list[float]]:
    """Reservations in commit order: each at its own moment (instances' clocks agree but
    their requests interleave), with its commit delay, then a send time in the allowed range."""
    pacing = paced or Pacing(draw(st.sampled_from([1.0, 10.0])), draw(st.integers(1, 15)))
    count = draw(st.integers(1, 40))
    moments = sorted(draw(st.lists(st.floats(0, 5), min_size=count, max_size=count)))
    doc: dict[str, Any] | None = None
    sends = []
    for moment in moments:
        now = NOW + timedelta(seconds=moment)
        delay = draw(st.floats(0, 0.2))
        update, reservation = reserve(doc, now, delay, pacing)
        assert reservation.reserved and update is not None
        doc = {**(doc or {}), **update}
        earliest = (reservation.send_at - NOW).total_seconds()
        latest = max(earliest, moment + delay)  # the commit returned, the slot had come
        sends.append(draw(st.floats(earliest, latest)) if latest > earliest else earliest)
    return pacing, sends


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_sends_anywhere_in_their_range_fit_the_providers_bucket(schedule: tuple[Pacing, list[float]]) -> None:
    assert_fits_the_bucket(*schedule)


def assert_fits_the_bucket(pacing: Pacing, sends: list[float]) -> None:
    arrivals = sorted(sends)  # the order CHART-IMG sees, whatever the reservation order
    for i, start in enumerate(arrivals):
        for j in range(i, len(arrivals)):
            in_window = j - i + 1
            # datetimes carry microseconds and epoch floats ~0.2 µs: 10 µs of slack
            allowed = pacing.burst + (arrivals[j] - start + TIME_GRAIN) * pacing.rate_per_second
            assert in_window <= allowed, (i, j, arrivals)


@st.composite
def late_arrivals(draw: Any) -> tuple[Pacing, list[float]]:
    """A schedule paced with an arrival jitter J, each request reaching the provider up to J
    after it was sent (J no more than the burst banks: beyond that no schedule can help)."""
    rate, burst = draw(st.sampled_from([1.0, 10.0])), draw(st.integers(2, 15))
    jitter = draw(st.floats(0, (burst - 1) / rate))
    _, sends = draw(schedules(Pacing(rate, burst, jitter)))
    return Pacing(rate, burst), [send + draw(st.floats(0, jitter)) for send in sends]


@settings(max_examples=300, deadline=None)
@given(late_arrivals())
def test_requests_up_to_the_jitter_late_still_fit_the_providers_bucket(
    schedule: tuple[Pacing, list[float]],
) -> None:
    # e.g. a burst of three reaching CHART-IMG 0.2 s late, the next request on time
    assert_fits_the_bucket(*schedule)


def test_the_jitter_is_taken_off_the_banked_burst() -> None:
    assert Pacing(1.0, 3, arrival_jitter=0.3).tolerance == 2.0 - 0.3
    assert Pacing(1.0, 1, arrival_jitter=0.3).tolerance == 0.0  # nothing banked to give up


@given(
    count=st.integers(1, 12),
    used=st.integers(0, 12),
    limit=st.integers(0, 12),
    burst=st.integers(1, 5),
    tat_ahead=st.one_of(st.none(), st.floats(-5, 5)),
    max_wait=st.floats(0, 3),
)
def test_a_batch_of_reservations_is_the_same_reservations_one_after_another(
    count: int, used: int, limit: int, burst: int, tat_ahead: float | None, max_wait: float
) -> None:
    pacing = Pacing(rate_per_second=1.0, burst=burst)
    doc: dict[str, Any] = {"windowStart": "2026-11-23T00:00:00Z", "usageToday": used, "dailyLimit": limit}
    if tat_ahead is not None:
        doc["tat"] = NOW.timestamp() + tat_ahead
    at = ReservationTime(NOW, max_wait, send_delay=0.02)
    update, batch = reserve_many(ReservationRequest("acc", count, 44, pacing), doc, at)

    sequential, current, last_update = [], dict(doc), None
    for _ in range(count):
        fields, reservation = reserve_one("acc", current, default_limit=44, pacing=pacing, at=at)
        sequential.append(reservation)
        if fields is not None:
            current.update(fields)
            last_update = fields
        if not reservation.reserved:
            break
    assert [(r, r.send_at, r.refusal, r.tat) for r in batch] == [
        (r, r.send_at, r.refusal, r.tat) for r in sequential
    ]
    assert update == (None if last_update is None else {k: current[k] for k in update or {}})
    assert {**doc, **(update or {})} == current


# --- the daily window -------------------------------------------------------------------------

TODAY = "2026-11-23T00:00:00Z"
YESTERDAY = "2026-11-22T00:00:00Z"


@pytest.fixture
def machine_in_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local timezone of a laptop far from UTC (Cloud Run's is UTC): the window must not
    follow it."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_window_is_the_utc_day_whatever_the_machines_timezone(machine_in_tokyo: None) -> None:
    tokyo = timezone(timedelta(hours=9))
    early_in_tokyo = datetime(2026, 11, 24, 8, 30, tzinfo=tokyo)  # 2026-11-23T23:30Z
    assert window_start(early_in_tokyo) == TODAY
    assert next_utc_midnight(early_in_tokyo) == datetime(2026, 11, 24, tzinfo=UTC)
    assert window_start(NOW) == TODAY and next_utc_midnight(NOW) == datetime(2026, 11, 24, tzinfo=UTC)


def test_the_next_midnight_is_exact() -> None:
    late = datetime(2026, 11, 23, 23, 59, 59, 999999, tzinfo=UTC)
    assert next_utc_midnight(late) == datetime(2026, 11, 24, 0, 0, 0, 0, tzinfo=UTC)
    assert next_utc_midnight(datetime(2026, 11, 23, tzinfo=UTC)) == datetime(2026, 11, 24, tzinfo=UTC)


@pytest.mark.parametrize(
    ("rate", "burst", "jitter"), [(0.0, 1, 0.0), (-1.0, 1, 0.0), (1.0, 0, 0.0), (1.0, 1, -0.1)]
)
def test_a_pacing_outside_its_domain_is_refused_naming_it(rate: float, burst: int, jitter: float) -> None:
    with pytest.raises(ValueError) as refused:
        Pacing(rate, burst, jitter)
    assert str(refused.value) == "pacing needs rate_per_second > 0, burst >= 1 and arrival_jitter >= 0"


def test_the_documents_daily_limit_wins_even_when_zero() -> None:
    assert daily_limit_of({"dailyLimit": 0}, 44) == 0  # an account switched off for the day
    assert daily_limit_of({"dailyLimit": 10}, 44) == 10
    for wrong in (-1, True, "10", 10.0, None):
        assert daily_limit_of({"dailyLimit": wrong}, 44) == 44, wrong
    assert daily_limit_of(None, 44) == 44


def test_a_reservation_says_which_account_what_it_used_and_its_limit() -> None:
    doc = {"windowStart": TODAY, "usageToday": 3, "dailyLimit": 10}
    update, reservation = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert update == {"windowStart": TODAY, "usageToday": 4}  # no pacing: no tat
    assert reservation == Reservation("acc", True, 4, 10)
    assert (reservation.send_at, reservation.refusal, reservation.tat) == (NOW, None, None)


def test_an_exhausted_account_refuses_and_a_stale_window_is_reset_anyway() -> None:
    today = {"windowStart": TODAY, "usageToday": 10, "dailyLimit": 10}
    update, refused = reserve_one("acc", today, default_limit=44, at=ReservationTime(NOW))
    assert update is None  # the document already describes today
    assert refused == Reservation("acc", False, 10, 10) and refused.refusal is ReservationRefusal.EXHAUSTED
    yesterday = {"windowStart": "2026-11-22T00:00:00Z", "usageToday": 7, "dailyLimit": 0}
    update, refused = reserve_one("acc", yesterday, default_limit=44, at=ReservationTime(NOW))
    assert update == {"windowStart": TODAY, "usageToday": 0}
    assert refused == Reservation("acc", False, 0, 0) and refused.refusal is ReservationRefusal.EXHAUSTED


def test_a_slot_too_far_away_is_busy_and_says_the_pacing_state() -> None:
    tat = NOW.timestamp() + 10.0
    yesterday = {"windowStart": "2026-11-22T00:00:00Z", "usageToday": 7, "tat": tat}
    update, busy = reserve_one("acc", yesterday, default_limit=44, pacing=BASIC, at=ReservationTime(NOW, 1.0))
    assert update == {"windowStart": TODAY, "usageToday": 0}  # nothing reserved, the window is today's
    assert busy == Reservation("acc", False, 0, 44)
    assert (busy.refusal, busy.tat, busy.send_at) == (ReservationRefusal.BUSY, tat, None)
    # within the wait the same slot is taken
    update, taken = reserve_one(
        "acc", yesterday, default_limit=44, pacing=BASIC, at=ReservationTime(NOW, 8.0)
    )
    assert taken == Reservation("acc", True, 1, 44) and taken.tat == tat + 1.0
    assert taken.send_at == NOW + timedelta(seconds=10.0 - BASIC.tolerance)


def test_marking_an_account_exhausted_keeps_the_units_really_spent() -> None:
    """After a quota 429 the count stays the units spent (today's, 0 for an older window):
    the exhaustion is a field of its own (contract §14.4: "a separate flag/field"), so
    usageToday stays what CHART-IMG could count (issue 27: units == calls)."""

    def counted(doc: dict[str, Any] | None) -> tuple[Any, Any]:
        fields = exhausted_fields(doc, now=NOW)
        return fields["windowStart"], fields["usageToday"]

    assert counted({"windowStart": TODAY, "usageToday": 60}) == (TODAY, 60)
    assert counted({"windowStart": TODAY, "usageToday": 3, "dailyLimit": 10}) == (TODAY, 3)
    assert counted({"windowStart": "2026-11-22T00:00:00Z", "usageToday": 60}) == (TODAY, 0)
    assert counted(None) == (TODAY, 0)


def test_an_exhausted_key_is_refused_until_its_moment_then_served_again() -> None:
    """Below its limit by our count, a key CHART-IMG said is exhausted is refused (nothing
    written, the count untouched) until exhaustedUntil; after it, reserved as usual."""
    spent = {"windowStart": TODAY, "usageToday": 3}
    doc = {**spent, **exhausted_fields(spent, now=NOW)}
    assert exhausted_now(doc, NOW) == datetime(2026, 11, 24, tzinfo=UTC)
    update, refused = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert update is None and (refused.reserved, refused.refusal) == (False, ReservationRefusal.EXHAUSTED)
    assert refused.usage_today == 3
    early = {**doc, "exhaustedUntil": "2026-11-23T11:00:00Z"}  # an hour before NOW: over
    assert exhausted_now(early, NOW) is None
    assert reserve_one("acc", early, default_limit=44, at=ReservationTime(NOW))[1].reserved


def test_a_keys_exhaustion_ends_at_its_moment() -> None:
    """exhaustedUntil is the first moment the key serves again: exhausted a microsecond
    before it, served at it."""
    doc = {"windowStart": TODAY, "usageToday": 3, "exhaustedUntil": "2026-11-23T12:00:00Z"}  # NOW
    assert exhausted_now(doc, NOW - timedelta(microseconds=1)) == NOW
    assert exhausted_now(doc, NOW) is None
    assert reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))[1].reserved


# --- what CHART-IMG said about the key, as the document keeps it -----------------------------


def test_a_disabled_key_is_refused_without_a_write() -> None:
    doc = {"windowStart": TODAY, "usageToday": 3, **disabled_fields(None, reason="refused twice", now=NOW)}
    assert disabled_now(doc, NOW)
    update, reservation = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert update is None
    assert (reservation.reserved, reservation.refusal) == (False, ReservationRefusal.DISABLED)


def test_a_key_disabled_an_older_day_is_tried_again_and_the_flag_cleared() -> None:
    doc = {"windowStart": "2026-11-22T00:00:00Z", "usageToday": 9, "disabled": True, "disabledReason": "x"}
    assert not disabled_now(doc, NOW)
    update, reservation = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert reservation.reserved and update == {"windowStart": TODAY, "usageToday": 1, "disabled": False}
    reset, refused = reserve_one("acc", {**doc, "dailyLimit": 0}, default_limit=44, at=ReservationTime(NOW))
    assert refused.refusal is ReservationRefusal.EXHAUSTED
    assert reset == {"windowStart": TODAY, "usageToday": 0, "disabled": False}  # written with a refusal too


def test_exhaustion_records_until_when_and_why() -> None:
    fields = exhausted_fields({"windowStart": TODAY, "usageToday": 7}, now=NOW, reason="r")
    assert fields == {
        "windowStart": TODAY,
        "usageToday": 7,
        "exhaustedUntil": "2026-11-24T00:00:00.000Z",
        "exhaustedReason": "r",
    }


def test_a_disabled_account_refuses_naming_itself_its_use_and_its_limit() -> None:
    doc = {"usageToday": 3, "windowStart": TODAY, "disabled": True}
    fields, reservation = reserve_one("acc1", doc, default_limit=44, at=ReservationTime(NOW))
    assert fields is None
    assert reservation == Reservation("acc1", False, 3, 44)
    assert reservation.refusal is ReservationRefusal.DISABLED


def test_disabling_keeps_the_days_count() -> None:
    doc = {"usageToday": 5, "windowStart": TODAY}
    assert disabled_fields(doc, reason="refused", now=NOW)["usageToday"] == 5


# --- a unit given back (the call never left) -------------------------------------------------


def test_a_reservation_says_the_window_it_was_counted_in() -> None:
    _, reservation = reserve_one("acc", None, default_limit=44, at=ReservationTime(NOW))
    assert reservation.day == TODAY
    _, refused = reserve_one(
        "acc", {"windowStart": TODAY, "usageToday": 44}, default_limit=44, at=ReservationTime(NOW)
    )
    assert refused.day is None


def test_a_unit_given_back_lowers_todays_count_and_counts_the_refund_pacing_untouched() -> None:
    doc = {"windowStart": TODAY, "usageToday": 3, "tat": 123.0, "refundedToday": 1}
    update, refund = refund_one("acc", doc, day=TODAY)
    assert update == {"usageToday": 2, "refundedToday": 2}  # no tat: the slot stays spent
    assert refund == Refund("acc", True, 2, 2)
    assert refunded_today({**doc, **update}, NOW) == 2


@pytest.mark.parametrize(
    ("doc", "why_not"),
    [
        ({"windowStart": YESTERDAY, "usageToday": 3}, "a new UTC day began: its count started again"),
        ({"windowStart": TODAY, "usageToday": 0}, "no unit counted"),
        ({"windowStart": TODAY}, "no unit counted"),
        (None, "a new UTC day began: its count started again"),
    ],
    ids=["new-day", "zero", "no-count", "no-document"],
)
def test_nothing_is_given_back_when_the_count_is_not_ours_to_lower(
    doc: dict[str, Any] | None, why_not: str
) -> None:
    update, refund = refund_one("acc", doc, day=TODAY)
    assert update is None and not refund.given_back and refund.why_not == why_not
    used = (doc or {}).get("usageToday", 0)
    assert refund == Refund("acc", False, used, 0, why_not)


def test_a_stale_days_refunds_count_for_nothing_and_are_reset_with_the_window() -> None:
    old = {"windowStart": YESTERDAY, "usageToday": 9, "refundedToday": 4}
    assert refunded_today(old, NOW) == 0
    update, _ = reserve_one("acc", old, default_limit=44, at=ReservationTime(NOW))
    assert update is not None and update["refundedToday"] == 0 and update["usageToday"] == 1
    assert exhausted_fields(old, now=NOW)["refundedToday"] == 0
    assert disabled_fields(old, reason="r", now=NOW)["refundedToday"] == 0
    assert "refundedToday" not in exhausted_fields({"windowStart": TODAY}, now=NOW)
    todays = {"windowStart": TODAY, "usageToday": 5, "refundedToday": 3}  # today's refunds are kept
    assert "refundedToday" not in exhausted_fields(todays, now=NOW)
    assert "refundedToday" not in disabled_fields(todays, reason="r", now=NOW)
    assert refunded_today({"windowStart": TODAY, "refundedToday": True}, NOW) == 0  # not a count


def test_an_exhausted_keys_unit_that_never_left_is_given_back(machine_in_tokyo: None) -> None:
    """The exhaustion is a field of its own: the count is the units spent, and a call that
    never left was not one of them, whatever the machine's timezone."""
    doc = {"windowStart": TODAY, "usageToday": 3}
    exhausted = {**doc, **exhausted_fields(doc, now=NOW)}
    update, refund = refund_one("acc", exhausted, day=TODAY)
    assert update == {"usageToday": 2, "refundedToday": 1} and refund == Refund("acc", True, 2, 1)
