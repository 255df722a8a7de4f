"""tests/harness/midnight.py: a test that writes today's usage starts only with room left in
the UTC day, judged on a fake clock that the fake sleep moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harness.midnight import now_with_room_in_the_day, seconds_to_midnight


class MovedBySleep:
    def __init__(self, start: datetime) -> None:
        self.current = start
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.current += timedelta(seconds=seconds)


def at(hour: int, minute: int, second: int = 0, microsecond: int = 0) -> datetime:
    return datetime(2026, 11, 26, hour, minute, second, microsecond, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "expected_left"),
    [(at(0, 0), 86400.0), (at(12, 0), 43200.0), (at(23, 59, 59, 500000), 0.5), (at(23, 50), 600.0)],
)
def test_seconds_to_midnight(start: datetime, expected_left: float) -> None:
    assert seconds_to_midnight(start) == expected_left


@pytest.mark.parametrize("start", [at(0, 0), at(12, 0), at(23, 50), at(23, 45, 30)])
def test_with_room_left_it_returns_at_once(start: datetime) -> None:
    clock = MovedBySleep(start)
    assert now_with_room_in_the_day(timedelta(minutes=10), now=clock.now, sleep=clock.sleep) == start
    assert clock.slept == []


@pytest.mark.parametrize(
    ("start", "expected_sleep"),
    [(at(23, 50, 0, 1), 600.999999), (at(23, 55), 301.0), (at(23, 59, 59, 900000), 1.1)],
)
def test_too_close_to_midnight_it_waits_into_the_new_day(start: datetime, expected_sleep: float) -> None:
    clock = MovedBySleep(start)
    got = now_with_room_in_the_day(timedelta(minutes=10), now=clock.now, sleep=clock.sleep)
    assert clock.slept == [pytest.approx(expected_sleep)]
    assert got == clock.current == datetime(2026, 11, 27, 0, 0, 1, tzinfo=UTC)


def test_the_room_asked_for_is_the_one_kept() -> None:
    clock = MovedBySleep(at(23, 0))
    assert now_with_room_in_the_day(timedelta(minutes=90), now=clock.now, sleep=clock.sleep).day == 27
    assert clock.slept == [3601.0]
