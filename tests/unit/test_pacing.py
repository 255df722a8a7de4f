"""The per-account token bucket (core/pacing.py), on a fake clock."""

from __future__ import annotations

import threading

import pytest

from harness.chart_img_server import FakeClock
from worker_chart_export.core.pacing import TokenBucket


def test_starts_full_then_refills_at_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, 3, clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_time() == pytest.approx(1.0)
    clock.advance(0.5)
    assert not bucket.try_acquire()
    clock.advance(0.5)
    assert bucket.try_acquire()


def test_reserve_queues_callers_in_order() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, clock=clock)
    waits = [bucket.reserve(max_wait=10) for _ in range(6)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.5, 1.0, 1.5])


def test_reserve_beyond_max_wait_books_nothing() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1.0, 1, clock=clock)
    assert bucket.reserve(max_wait=0) == 0.0
    assert bucket.reserve(max_wait=0.5) is None  # next slot is 1 s away
    assert bucket.reserve(max_wait=1.0) == pytest.approx(1.0)  # ...and it was not taken


def test_idle_time_never_banks_more_than_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, 2, clock=clock)
    clock.advance(3600)
    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]


def test_sends_at_reserved_slots_conform_to_rate_and_burst() -> None:
    """Any window of T seconds holds at most burst + rate*T sends."""
    clock = FakeClock()
    rate, burst = 1.0, 3
    bucket = TokenBucket(rate, burst, clock=clock)
    sends = []
    for i in range(20):
        clock.advance(0.1 * (i % 3))  # callers arrive irregularly
        wait = bucket.reserve(max_wait=100)
        assert wait is not None
        sends.append(clock.monotonic() + wait)
    for i, start in enumerate(sends):
        for end in sends[i:]:
            inside = sum(1 for s in sends if start <= s <= end)
            assert inside <= burst + rate * (end - start) + 1e-9


def test_concurrent_callers_get_exactly_burst_tokens() -> None:
    clock = FakeClock()
    bucket = TokenBucket(0.001, 5, clock=clock)
    results: list[bool] = []
    lock = threading.Lock()

    def take() -> None:
        got = bucket.try_acquire()
        with lock:
            results.append(got)

    threads = [threading.Thread(target=take) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 5


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_rejects_nonsense(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst, clock=FakeClock().monotonic)
