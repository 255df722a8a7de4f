"""When to try a CHART-IMG request again, and how long to wait first (contract §13.5).

The decisions are tenacity strategies over plain values: the attempt loop in
`adapters/chart_img/api.py` runs them with an injected sleep, so tests never wait for real.

- RETRY (5xx, timeout, connection error): back off exponentially (tenacity's
  `wait_exponential`), plus jitter (`core.retrying.wait_jitter`, its randomness injected).
- EXHAUSTED, RATE_LIMITED, BAD_KEY: no backoff: the next attempt goes to another key (or,
  after a rate 429 on the only key, waits in the limiter for the key's cooldown).
- at most `max_attempts` attempts in total, across accounts (`stop_after_attempt`);
- never sleep into, or start an attempt in, the last `min_attempt_seconds` of the budget
  (`core.retrying.stop_before_budget_ends`, the one budget stop).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenacity import RetryCallState, stop_after_attempt, wait_exponential
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import ROTATING, Disposition
from worker_chart_export.core.retrying import stop_before_budget_ends, wait_jitter

AGAIN = frozenset({Disposition.RETRY, *ROTATING})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_backoff: float = 0.5  # seconds before the 2nd attempt; doubles each time
    max_backoff: float = 4.0  # where the doubling stops
    jitter: float = 0.5  # up to this many seconds added at random, to spread retries
    # an attempt that cannot get this much time is not started (it would only burn quota)
    min_attempt_seconds: float = 1.0

    def wait(self, rand: Callable[[], float] = random.random) -> wait_base:
        """After failed attempt n: initial_backoff x 2^(n-1), at most max_backoff, plus
        jitter x rand(); nothing when the next attempt moves to another key."""
        backoff = wait_exponential(multiplier=self.initial_backoff, max=self.max_backoff)
        return _unless_rotating(backoff + wait_jitter(self.jitter, rand))

    def stop(self, budget: Budget) -> stop_base:
        return stop_after_attempt(self.max_attempts) | stop_before_budget_ends(
            budget, reserve=self.min_attempt_seconds
        )


class HasDisposition(Protocol):
    @property
    def disposition(self) -> Disposition | None:
        """None: nothing further can be tried (no account, no time)."""
        ...


def _last(retry_state: RetryCallState) -> HasDisposition:
    assert retry_state.outcome is not None
    result: HasDisposition = retry_state.outcome.result()
    return result


def wants_retry(retry_state: RetryCallState) -> bool:
    outcome = retry_state.outcome
    if outcome is None or outcome.failed:
        return False  # a bug in the attempt: let tenacity re-raise it
    return _last(retry_state).disposition in AGAIN


class _unless_rotating(wait_base):  # lower case, as tenacity names its waits
    """`backoff` after a transient error; none when the next attempt goes to another key."""

    def __init__(self, backoff: wait_base) -> None:
        self.backoff = backoff

    def __call__(self, retry_state: RetryCallState) -> float:
        if _last(retry_state).disposition in ROTATING:
            return 0.0
        return self.backoff(retry_state)
