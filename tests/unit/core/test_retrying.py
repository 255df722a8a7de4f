"""core/retrying.py's pieces, and the chart request's policy composed from them and tenacity's
own (core/chart_img/request_retries.py): run by tenacity on a FakeClock, never sleeping."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tenacity import RetryCallState, Retrying, retry_if_result, wait_fixed

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import Disposition
from worker_chart_export.core.chart_img.request_retries import RetryPolicy, wants_retry
from worker_chart_export.core.retrying import stop_before_budget_ends, wait_jitter, within_budget
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


@pytest.mark.parametrize(
    ("attempt", "wait"),
    [(1, 0.5 + 0.25), (2, 1.0 + 0.25), (3, 2.0 + 0.25), (4, 4.0 + 0.25), (6, 4.0 + 0.25)],
)
def test_a_transient_error_backs_off_exponentially_with_jitter(attempt: int, wait: float) -> None:
    policy_wait = RetryPolicy().wait(rand=lambda: 0.5)
    assert policy_wait(state(attempt, result=Attempt(Disposition.RETRY))) == pytest.approx(wait)


@pytest.mark.parametrize(
    "disposition", [Disposition.EXHAUSTED, Disposition.RATE_LIMITED, Disposition.BAD_KEY]
)
def test_a_move_to_another_key_waits_for_nothing(disposition: Disposition) -> None:
    assert RetryPolicy().wait(rand=lambda: 0.5)(state(2, result=Attempt(disposition))) == 0.0


def test_the_chart_stop_caps_attempts_and_keeps_an_attempts_minimum() -> None:
    clock = FakeClock()
    stop = RetryPolicy(max_attempts=3, min_attempt_seconds=1.0).stop(Budget.starting_now(5.0, clock))
    assert not stop(state(2, upcoming_sleep=3.5))
    assert stop(state(3, upcoming_sleep=0.0))  # the cap
    assert stop(state(1, upcoming_sleep=4.5))  # 0.5 s would be left


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
