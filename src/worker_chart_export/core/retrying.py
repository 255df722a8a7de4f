"""The tenacity pieces tenacity lacks, written once for every retry bounded by a Budget.

- `stop_before_budget_ends(budget, reserve=...)`: THE budget stop. A retry bounded by a
  step's or a finalize's budget stops when, after the wait before its next attempt, less
  than `reserve` seconds of the budget would be left (or none at all): it never sleeps past
  its budget, nor starts an attempt without the time that attempt needs. The chart request
  reserves an attempt's minimum time (core/chart_img/request_retries.py); the finalize reserves nothing
  and waits `within_budget`, so its last attempt comes at the budget's end
  (service/finalize.py).
- `within_budget(wait, budget)`: `wait`, cut to what is left of `budget`.
- `wait_jitter(seconds, rand)`: up to `seconds` at random, drawn from an injected `rand`
  (tenacity's `wait_random` draws from the `random` module, which a test cannot fix).

Backoff itself is tenacity's own (`wait_exponential`, `wait_exponential_jitter`), and so is
the attempt cap (`stop_after_attempt`). Sleeps go to the injected clock (`sleep=`).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tenacity import RetryCallState
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from worker_chart_export.core.budget import Budget


class stop_before_budget_ends(stop_base):  # lower case, as tenacity names its stops
    """Stop when the wait before the next attempt would leave less than `reserve` seconds
    of `budget`, or when the budget is over. Read on the budget's own clock, so a
    FakeClock-driven test runs the same retries without sleeping."""

    def __init__(self, budget: Budget, *, reserve: float = 0.0) -> None:
        self.budget = budget
        self.reserve = reserve

    def __call__(self, retry_state: RetryCallState) -> bool:
        left = self.budget.remaining()
        return left <= 0.0 or left - (retry_state.upcoming_sleep or 0.0) < self.reserve


class within_budget(wait_base):
    """`wait`, but never past the end of `budget`: the last attempt comes at its end."""

    def __init__(self, wait: wait_base, budget: Budget) -> None:
        self.wait = wait
        self.budget = budget

    def __call__(self, retry_state: RetryCallState) -> float:
        return min(self.wait(retry_state), self.budget.remaining())


class wait_jitter(wait_base):
    """Up to `seconds` at random: `seconds * rand()`, `rand` in [0, 1)."""

    def __init__(self, seconds: float, rand: Callable[[], float] = random.random) -> None:
        self.seconds = seconds
        self.rand = rand

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.seconds * self.rand()
