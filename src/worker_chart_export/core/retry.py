"""Every retry policy of the worker, in one place, and the vocabulary they share.

A policy is a `Backoff`: at most `attempts` tries in all (None: a budget alone ends them),
waiting `base x factor^(n-1)` seconds after failed try n plus up to `jitter` seconds at random,
never more than `cap` in all; or, with `full_jitter` (contenders that lost together must not
come back together), a wait drawn at random between `floor` and that. The loops are
tenacity's (`Retrying` with the injected clock's sleep); the pieces tenacity lacks are here
once: THE budget stop (`stop_before_budget_ends`), a wait cut to a budget (`within_budget`)
and randomness a test can fix (`wait_jitter`, `wait_full_jitter`).

docs/design.md, "Retry policies", has the table of the policies below and why each is so;
settings override a few of them (bootstrap passes what they say). Adapters receive their
policies from bootstrap: no retry constant lives in an adapter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from tenacity import RetryCallState, stop_after_attempt, stop_never, wait_exponential
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from worker_chart_export.core.budget import Budget

Rand = Callable[[], float]  # [0, 1), injected so a test can fix it


@dataclass(frozen=True)
class Backoff:
    attempts: int | None  # tries in all, the first included; None: bounded by a budget only
    base: float  # seconds before the second try
    cap: float  # where the growth stops
    factor: float = 2.0
    jitter: float = 0.0  # up to this many seconds added at random (the cap still holds)
    full_jitter: bool = False  # each wait drawn at random in [floor, the exponential]
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")
        if self.base < 0 or self.cap < self.base or self.factor < 1 or self.jitter < 0 or self.floor < 0:
            raise ValueError("a retry policy needs 0 <= base <= cap, factor >= 1, jitter >= 0, floor >= 0")

    def delay(self, failed: int) -> float:
        """The wait after failed try `failed` (1-based), without its randomness."""
        return min(self.cap, self.base * self.factor ** min(max(failed - 1, 0), 64))

    def total_delay(self) -> float:
        """The waits between all `attempts` tries, without their randomness."""
        return sum(self.delay(n) for n in range(1, self.attempts or 1))

    def wait(self, rand: Rand = random.random) -> wait_base:
        exponential = wait_exponential(multiplier=self.base, max=self.cap, exp_base=self.factor)
        if self.full_jitter:
            return wait_full_jitter(exponential, floor=self.floor, rand=rand)
        if not self.jitter:
            return exponential
        return wait_capped(exponential + wait_jitter(self.jitter, rand), self.cap)

    def stop(self, budget: Budget | None = None, *, reserve: float = 0.0) -> stop_base:
        by_count: stop_base = stop_after_attempt(self.attempts) if self.attempts else stop_never
        if budget is None:
            return by_count
        return by_count | stop_before_budget_ends(budget, reserve=reserve)

    def with_attempts(self, attempts: int | None) -> Backoff:
        return replace(self, attempts=attempts)


class stop_before_budget_ends(stop_base):  # lower case, as tenacity names its stops
    """THE budget stop: stop when the wait before the next attempt would leave less than
    `reserve` seconds of `budget`, or when the budget is over. Read on the budget's own
    clock, so a FakeClock-driven test runs the same retries without sleeping."""

    def __init__(self, budget: Budget, *, reserve: float = 0.0) -> None:
        self.budget = budget
        self.reserve = reserve

    def __call__(self, retry_state: RetryCallState) -> bool:
        left = self.budget.remaining()
        return left <= 0.0 or left - (retry_state.upcoming_sleep or 0.0) < self.reserve


class within_budget(wait_base):
    """`wait`, but never so long that less than `reserve` seconds of `budget` are left after
    it: in a window longer than the waits, the last attempt comes at the budget's end."""

    def __init__(self, wait: wait_base, budget: Budget, *, reserve: float = 0.0) -> None:
        self.wait = wait
        self.budget = budget
        self.reserve = reserve

    def __call__(self, retry_state: RetryCallState) -> float:
        return max(0.0, min(self.wait(retry_state), self.budget.remaining() - self.reserve))


class wait_jitter(wait_base):
    """Up to `seconds` at random: `seconds * rand()`, `rand` in [0, 1)."""

    def __init__(self, seconds: float, rand: Rand = random.random) -> None:
        self.seconds = seconds
        self.rand = rand

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.seconds * self.rand()


class wait_capped(wait_base):
    """`wait`, never more than `cap` (tenacity's combination of waits adds, and caps nothing)."""

    def __init__(self, wait: wait_base, cap: float) -> None:
        self.wait = wait
        self.cap = cap

    def __call__(self, retry_state: RetryCallState) -> float:
        return min(self.cap, self.wait(retry_state))


class wait_full_jitter(wait_base):
    """`wait` drawn at random down to `floor` (AWS's "full jitter"): tenacity's own
    wait_random_exponential draws from the `random` module, which a test cannot fix."""

    def __init__(self, wait: wait_base, *, floor: float = 0.0, rand: Rand = random.random) -> None:
        self.wait = wait
        self.floor = floor
        self.rand = rand

    def __call__(self, retry_state: RetryCallState) -> float:
        high = max(self.floor, self.wait(retry_state))
        return self.floor + (high - self.floor) * self.rand()


# --- the policies (docs/design.md, "Retry policies") ----------------------------------------

# A chart's HTTP attempts across accounts (worker contract §13.5: few, with exponential
# backoff, inside the step's budget; the error model's reference spacing: 1 s doubling to
# 32 s, 5 attempts), jittered by up to 1 s. Every transient answer waits this (or its
# Retry-After, or the keys' cooldown) first, so a handful of attempts spans a bad window of
# tens of seconds; the wait is cut to what the budget leaves. CHART_IMG_MAX_ATTEMPTS
# overrides `attempts`.
CHART_ATTEMPTS = Backoff(attempts=5, base=1.0, cap=32.0, jitter=1.0)
# No attempt starts with less of the budget left: it could only burn a unit.
CHART_ATTEMPT_MIN_SECONDS = 1.0

# A PNG or the manifest, once the charts are paid for (error model, partial failures 3:
# retry only the failing write, with the reference backoff), inside the step's budget.
ARTIFACT_WRITES = Backoff(attempts=5, base=1.0, cap=32.0, jitter=1.0)
# Each write request is made once by the store: ARTIFACT_WRITES above is its retry, in the
# service, bounded by the step's budget (one loop, not one inside another).
ARTIFACT_WRITE_REQUEST = Backoff(attempts=1, base=0.0, cap=0.0)
# One other request to the bucket: the check before a claim, a listing, a read, serve's probe.
BUCKET_REQUESTS = Backoff(attempts=3, base=0.2, cap=2.0, jitter=0.2)
# A manifest write that met a newer generation (412) asks the fence again, this many times.
MANIFEST_FENCE_TRIES = 3

# Recording the step's result: no attempt starts after FINALIZE_BUDGET_SECONDS.
FINALIZE = Backoff(attempts=None, base=0.2, cap=5.0, jitter=1.0)
# The claim's commits that lost to other writes of the run while the step stayed READY
# (error model, "Step claim retries": 3-5 retries, 100-500 ms apart with jitter).
CLAIM_COMMITS = Backoff(attempts=5, base=0.2, cap=0.5, full_jitter=True, floor=0.1)
# A usage document's compare-and-set that lost to another instance's.
USAGE_COMMITS = Backoff(attempts=8, base=0.05, cap=0.5, full_jitter=True)
# Firestore's own transaction loop (the rare usage verdicts) and the finalize's and reap's
# compare-and-set rounds: tries while the document keeps changing under them.
FIRESTORE_WRITE_ROUNDS = 5
# One Firestore RPC: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED retried by
# api_core within FIRESTORE_RPC_DEADLINE_SECONDS (the client's defaults retry for 60-300 s,
# which a step's budget cannot afford).
FIRESTORE_RPC = Backoff(attempts=None, base=0.1, cap=1.0, factor=1.5)
FIRESTORE_RPC_DEADLINE_SECONDS = 10.0

# A key's cooldown after a 429 that is not the day's quota: its Retry-After when it sends
# one (up to KEY_RETRY_AFTER_MAX_SECONDS), else this, growing with the key's 429 streak.
KEY_COOLDOWN = Backoff(attempts=None, base=1.0, cap=30.0)
KEY_RETRY_AFTER_MAX_SECONDS = 600.0
# An account found at its daily limit (CHART-IMG said so, or our count reached it) is not
# asked again for this long (nor past the next 00:00 UTC): its usage document is read again
# then, in case another instance's count or an operator's reset says otherwise.
EXHAUSTED_RECHECK_SECONDS = 60.0

# A whole step whose charts a window longer than its budget kept from minImages: it waits
# (RUNNING, its lease moved to the wait's end), the reaper makes it READY again, and it is
# claimed anew, reusing what it paid for; FAILED once `attempts` are spent. 5 attempts, 1
# min doubling to 8: 15 minutes of waiting at least. STEP_MAX_ATTEMPTS,
# STEP_RETRY_BASE_SECONDS and STEP_RETRY_MAX_SECONDS override it.
STEP_ATTEMPTS = Backoff(attempts=5, base=60.0, cap=480.0)
