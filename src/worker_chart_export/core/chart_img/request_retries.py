"""When a CHART-IMG request is tried again, and how long it waits first (contract §13.5).

The decisions are tenacity strategies over plain values: the attempt loop in
`adapters/chart_img/api.py` runs them with an injected sleep, so tests never wait for real.
The numbers are `core.retry.CHART_ATTEMPTS`'s (the one home of retry policy).

- A transient answer (RETRY: 5xx, 408, 425, a timeout, a refused or reset connection, a 200
  that is not a whole PNG; RATE_LIMITED: a 429 that is not the day's quota, CHART-IMG
  throttling): the next attempt waits the policy's backoff, or the answer's Retry-After when
  longer, so a few attempts span a bad window instead of its first second; the limiter then
  also waits out the chosen key's cooldown.
- EXHAUSTED (the key's day is used up) and BAD_KEY (the key refused): no wait, the next
  attempt goes to another key at once: nothing says the moment is bad.
- At most the policy's attempts in total, across accounts; a wait is cut to what the budget
  leaves after an attempt's minimum time (`core.retry.within_budget`), and no attempt starts
  without that minimum (`core.retry.stop_before_budget_ends`, the one budget stop): in a
  window longer than the waits, the last attempt comes at the budget's end.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from tenacity import RetryCallState
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import ROTATING, Disposition
from worker_chart_export.core.retry import (
    CHART_ATTEMPT_MIN_SECONDS,
    CHART_ATTEMPTS,
    Backoff,
    Rand,
    within_budget,
)

AGAIN = frozenset({Disposition.RETRY, *ROTATING})
# The next attempt goes to another key at once: the answer was about one key (or one
# TradingView session), not the moment.
AT_ONCE = frozenset({Disposition.EXHAUSTED, Disposition.BAD_KEY, Disposition.SESSION_REFUSED})


@dataclass(frozen=True)
class RetryPolicy:
    backoff: Backoff = field(default=CHART_ATTEMPTS)
    # an attempt that cannot get this much time is not started (it would only burn quota)
    min_attempt_seconds: float = CHART_ATTEMPT_MIN_SECONDS

    @property
    def max_attempts(self) -> int:
        return self.backoff.attempts or 1

    def wait(self, budget: Budget, rand: Rand = random.random) -> wait_base:
        """After a transient answer: the backoff or its Retry-After, the longer, cut to the
        budget; nothing when the next attempt moves to another key."""
        waited = _after_answer(self.backoff.wait(rand))
        return within_budget(waited, budget, reserve=self.min_attempt_seconds)

    def stop(self, budget: Budget) -> stop_base:
        return self.backoff.stop(budget, reserve=self.min_attempt_seconds)


class HasDisposition(Protocol):
    @property
    def disposition(self) -> Disposition | None:
        """None: nothing further can be tried (no account, no time)."""
        ...

    @property
    def retry_after(self) -> float | None:
        """The answer's Retry-After in seconds, when it sent one."""
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


class _after_answer(wait_base):  # lower case, as tenacity names its waits
    """`backoff` after a transient answer, or its Retry-After when longer; none when the next
    attempt goes to another key."""

    def __init__(self, backoff: wait_base) -> None:
        self.backoff = backoff

    def __call__(self, retry_state: RetryCallState) -> float:
        last = _last(retry_state)
        if last.disposition in AT_ONCE:
            return 0.0
        return max(self.backoff(retry_state), last.retry_after or 0.0)
