"""core/usage.py's pacing: what a reservation says about when its request may leave.

The property test checks the claim docs/scaling.md relies on: requests sent anywhere between
their reservation's `send_at` and the moment it counted (its `now` plus `send_delay`), in any
order across instances, never exceed CHART-IMG's bucket (b + elapsed/T in any interval).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker_chart_export.core.types import ReservationRefusal
from worker_chart_export.core.usage import (
    Pacing,
    ReservationRequest,
    ReservationTime,
    disabled_fields,
    disabled_today,
    exhausted_fields,
    reserve_many,
    reserve_one,
)

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


# --- what CHART-IMG said about the key, as the document keeps it -----------------------------

TODAY = "2026-11-23T00:00:00Z"


def test_a_key_disabled_today_is_refused_without_a_write() -> None:
    doc = {"windowStart": TODAY, "usageToday": 3, **disabled_fields(None, reason="refused twice", now=NOW)}
    assert disabled_today(doc, NOW)
    update, reservation = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert update is None
    assert (reservation.reserved, reservation.refusal) == (False, ReservationRefusal.DISABLED)


def test_a_key_disabled_an_older_day_is_tried_again_and_the_flag_cleared() -> None:
    doc = {"windowStart": "2026-11-22T00:00:00Z", "usageToday": 9, "disabled": True, "disabledReason": "x"}
    assert not disabled_today(doc, NOW)
    update, reservation = reserve_one("acc", doc, default_limit=44, at=ReservationTime(NOW))
    assert reservation.reserved and update == {"windowStart": TODAY, "usageToday": 1, "disabled": False}
    reset, refused = reserve_one("acc", {**doc, "dailyLimit": 0}, default_limit=44, at=ReservationTime(NOW))
    assert refused.refusal is ReservationRefusal.EXHAUSTED
    assert reset == {"windowStart": TODAY, "usageToday": 0, "disabled": False}  # written with a refusal too


def test_exhaustion_records_until_when_and_why() -> None:
    fields = exhausted_fields({"windowStart": TODAY, "usageToday": 7}, default_limit=50, now=NOW, reason="r")
    assert fields == {
        "windowStart": TODAY,
        "usageToday": 50,
        "exhaustedUntil": "2026-11-24T00:00:00.000Z",
        "exhaustedReason": "r",
    }
