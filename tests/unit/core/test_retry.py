"""core/retry.py's pieces and policies, and the chart request's policy composed from them and
tenacity's own (core/chart_img/request_retries.py): run by tenacity on a FakeClock, never
sleeping."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tenacity import RetryCallState, Retrying, retry_if_result, wait_fixed

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import Disposition
from worker_chart_export.core.chart_img.request_retries import RetryPolicy, wants_retry
from worker_chart_export.core.retry import (
    CHART_ATTEMPTS,
    STEP_ATTEMPTS,
    Backoff,
    stop_before_budget_ends,
    wait_full_jitter,
    wait_jitter,
    within_budget,
)
from worker_chart_export.testing import FakeClock


def state(attempt: int, *, upcoming_sleep: float = 0.0, result: object = None) -> RetryCallState:
    retry_state = RetryCallState(None, None, (), {})
    retry_state.attempt_number = attempt
    retry_state.upcoming_sleep = upcoming_sleep
    retry_state.set_result(result)
    return retry_state


@pytest.mark.parametrize(
    ("left", "sleep", "reserve", "stops"),
    [
        (10.0, 8.5, 1.0, False),  # 1.5 s left after the wait: enough for an attempt
        (10.0, 9.5, 1.0, True),  # 0.5 s left: the attempt would only burn quota
        (10.0, 10.0, 0.0, False),  # nothing reserved: an attempt at the very end
        (10.0, 10.5, 0.0, True),  # the wait would run past the budget
        (0.0, 0.0, 0.0, True),  # the budget is over
    ],
)
def test_the_budget_stop_counts_the_wait_and_the_reserve(
    left: float, sleep: float, reserve: float, stops: bool
) -> None:
    budget = Budget.starting_now(left, FakeClock())
    stop = stop_before_budget_ends(budget, reserve=reserve)
    assert stop(state(1, upcoming_sleep=sleep)) is stops


def test_a_cancelled_budget_stops_at_once() -> None:
    budget = Budget.starting_now(60.0, FakeClock())
    budget.cancel()
    assert stop_before_budget_ends(budget)(state(1))


def test_a_wait_within_the_budget_ends_with_it() -> None:
    clock = FakeClock()
    budget = Budget.starting_now(3.0, clock)
    wait = within_budget(wait_fixed(5.0), budget)
    assert wait(state(1)) == 3.0
    clock.advance(2.5)
    assert wait(state(1)) == pytest.approx(0.5)
    clock.advance(1.0)
    assert wait(state(1)) == 0.0


def test_jitter_draws_from_the_injected_rand() -> None:
    assert wait_jitter(0.5, lambda: 0.5)(state(1)) == 0.25
    assert wait_jitter(0.5, lambda: 0.0)(state(1)) == 0.0


def test_a_retry_within_its_budget_makes_its_last_attempt_at_the_end() -> None:
    clock = FakeClock()
    budget = Budget.starting_now(10.0, clock)
    starts: list[float] = []

    def attempt() -> None:
        starts.append(clock.elapsed)

    Retrying(
        stop=stop_before_budget_ends(budget),
        wait=within_budget(wait_fixed(4.0), budget),
        retry=retry_if_result(lambda result: True),
        sleep=clock.sleep,
        retry_error_callback=lambda retry_state: None,
    )(attempt)
    assert starts == [0.0, 4.0, 8.0, 10.0] and clock.sleeps == [4.0, 4.0, 2.0]


@dataclass(frozen=True)
class Attempt:
    disposition: Disposition | None
    retry_after: float | None = None


def long_budget() -> Budget:
    return Budget.starting_now(3600.0, FakeClock())


@pytest.mark.parametrize(
    ("attempt", "wait"),
    # the error model's reference: 1 s doubling, plus up to 1 s of jitter (0.5 drawn), at most 32 s
    [(1, 1.0 + 0.5), (2, 2.0 + 0.5), (3, 4.0 + 0.5), (4, 8.0 + 0.5), (5, 16.0 + 0.5), (6, 32.0), (9, 32.0)],
)
@pytest.mark.parametrize("disposition", [Disposition.RETRY, Disposition.RATE_LIMITED])
def test_a_transient_answer_backs_off_exponentially_with_jitter(
    attempt: int, wait: float, disposition: Disposition
) -> None:
    """A 5xx, a timeout, a refused connection, a 429 that is not the day's quota: the next
    attempt waits, so a few attempts span a bad window instead of its first second."""
    policy_wait = RetryPolicy().wait(long_budget(), rand=lambda: 0.5)
    assert policy_wait(state(attempt, result=Attempt(disposition))) == pytest.approx(wait)


def test_a_longer_retry_after_is_waited_a_shorter_one_is_not() -> None:
    policy_wait = RetryPolicy().wait(long_budget(), rand=lambda: 0.0)
    assert policy_wait(state(1, result=Attempt(Disposition.RATE_LIMITED, retry_after=7.0))) == 7.0
    assert policy_wait(state(3, result=Attempt(Disposition.RETRY, retry_after=2.0))) == 4.0


@pytest.mark.parametrize(
    "disposition", [Disposition.EXHAUSTED, Disposition.BAD_KEY, Disposition.SESSION_REFUSED]
)
def test_a_move_to_another_key_waits_for_nothing(disposition: Disposition) -> None:
    wait = RetryPolicy().wait(long_budget(), rand=lambda: 0.5)
    assert wait(state(2, result=Attempt(disposition, retry_after=30.0))) == 0.0


def test_a_wait_is_cut_to_what_the_budget_leaves_after_an_attempts_minimum() -> None:
    clock = FakeClock()
    budget = Budget.starting_now(5.0, clock)
    wait = RetryPolicy(min_attempt_seconds=1.0).wait(budget, rand=lambda: 0.0)
    assert wait(state(4, result=Attempt(Disposition.RETRY))) == 4.0  # 8 s asked, 4 s left for it
    clock.advance(4.5)
    assert wait(state(4, result=Attempt(Disposition.RETRY))) == 0.0


def test_the_chart_stop_caps_attempts_and_keeps_an_attempts_minimum() -> None:
    clock = FakeClock()
    policy = RetryPolicy(backoff=Backoff(attempts=3, base=1.0, cap=32.0), min_attempt_seconds=1.0)
    stop = policy.stop(Budget.starting_now(5.0, clock))
    assert not stop(state(2, upcoming_sleep=3.5))
    assert stop(state(3, upcoming_sleep=0.0))  # the cap
    assert stop(state(1, upcoming_sleep=4.5))  # 0.5 s would be left


def test_five_chart_attempts_span_fifteen_seconds_of_a_bad_window() -> None:
    """The default: 1 + 2 + 4 + 8 = 15 s of waits before the fifth attempt (seed 001 §13.5's
    few attempts, spaced as the error model's reference)."""
    assert CHART_ATTEMPTS.attempts == 5 and CHART_ATTEMPTS.total_delay() == 15.0


def test_the_steps_attempts_wait_fifteen_minutes_at_least() -> None:
    """A window longer than a step's budget: 1 + 2 + 4 + 8 minutes between five attempts."""
    assert STEP_ATTEMPTS.attempts == 5 and STEP_ATTEMPTS.total_delay() == 15 * 60.0
    assert [STEP_ATTEMPTS.delay(n) for n in range(1, 7)] == [60, 120, 240, 480, 480, 480]


def test_full_jitter_draws_between_the_floor_and_the_exponential() -> None:
    wait = wait_full_jitter(Backoff(attempts=5, base=0.2, cap=0.5).wait(), floor=0.1, rand=lambda: 0.5)
    assert wait(state(1)) == pytest.approx(0.15)  # [0.1, 0.2]
    assert wait(state(3)) == pytest.approx(0.3)  # [0.1, 0.5]: the cap


@pytest.mark.parametrize(
    "numbers",
    [
        {"attempts": 0, "base": 1.0, "cap": 2.0},
        {"attempts": 3, "base": 2.0, "cap": 1.0},
        {"attempts": 3, "base": 1.0, "cap": 2.0, "factor": 0.5},
        {"attempts": 3, "base": -1.0, "cap": 2.0},
    ],
)
def test_a_policy_that_cannot_be_is_refused(numbers: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry policy"):
        Backoff(**numbers)  # type: ignore[arg-type]


def test_what_is_tried_again() -> None:
    assert wants_retry(state(1, result=Attempt(Disposition.RETRY)))
    assert wants_retry(state(1, result=Attempt(Disposition.RATE_LIMITED)))
    assert not wants_retry(state(1, result=Attempt(None)))


def test_under_a_second_left_is_still_time_for_an_attempt_without_a_wait() -> None:
    clock = FakeClock()
    budget = Budget.starting_now(0.5, clock)
    state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
    assert not budget.expired()
    assert not stop_before_budget_ends(budget)(state)  # no upcoming sleep, no reserve: go on
    clock.advance(0.5)
    assert budget.expired() and stop_before_budget_ends(budget)(state)


def test_a_failed_attempt_is_never_retried_by_its_disposition_but_re_raised() -> None:
    state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
    state.set_exception((KeyError, KeyError("a defect"), None))
    assert wants_retry(state) is False
