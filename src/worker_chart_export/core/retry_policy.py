"""When to try a CHART-IMG request again, and how long to wait first (contract §13.5).

The decisions are tenacity strategies over plain values: the attempt loop in
`adapters/chart_img/api.py` runs them with an injected sleep, so tests never wait for real.

- RETRY (5xx, timeout, connection error): back off exponentially, with jitter.
- EXHAUSTED, RATE_LIMITED, BAD_KEY: no backoff: the next attempt goes to another key (or,
  after a rate 429 on the only key, waits in the limiter for the key's cooldown).
- at most `max_attempts` attempts in total, across accounts;
- never sleep into, or start an attempt in, the last `min_attempt_seconds` of the budget.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tenacity import RetryCallState

from worker_chart_export.core.chart_img_answers import ROTATING, Disposition

AGAIN = frozenset({Disposition.RETRY, *ROTATING})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_backoff: float = 0.5  # seconds before the 2nd attempt; doubles each time
    max_backoff: float = 4.0
    jitter: float = 0.5  # up to this many seconds added at random, to spread retries
    # an attempt that cannot get this much time is not started (it would only burn quota)
    min_attempt_seconds: float = 1.0

    def backoff(self, attempt_number: int, rand: float) -> float:
        """Wait after failed attempt `attempt_number` (1-based); `rand` in [0, 1)."""
        exponential = self.initial_backoff * 2.0 ** max(0, attempt_number - 1)
        return min(self.max_backoff, exponential + self.jitter * rand)


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


@dataclass(frozen=True)
class BackoffWait:
    """Exponential backoff with jitter after a transient error; none when moving to another key."""

    policy: RetryPolicy
    rand: Callable[[], float] = random.random

    def __call__(self, retry_state: RetryCallState) -> float:
        if _last(retry_state).disposition in ROTATING:
            return 0.0
        return self.policy.backoff(retry_state.attempt_number, self.rand())


@dataclass(frozen=True)
class StopPolicy:
    """Stop at the attempt cap, or when the wait would leave too little budget to try again."""

    policy: RetryPolicy
    remaining: Callable[[], float]

    def __call__(self, retry_state: RetryCallState) -> bool:
        if retry_state.attempt_number >= self.policy.max_attempts:
            return True
        sleep = retry_state.upcoming_sleep or 0.0
        return self.remaining() - sleep < self.policy.min_attempt_seconds
