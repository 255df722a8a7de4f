"""A token bucket that paces calls to one CHART-IMG account (DESIGN §4.5).

CHART-IMG caps requests per key per second with a burst (BASIC 1/s burst 3, PRO 10/s
burst 15) and answers 429 past it, which burns the account for the day. So callers take a
token *before* sending and never send without one.

Tokens are reserved, not polled: `reserve()` books the next free slot under the lock (the
balance may go negative) and returns how long to wait for it, so concurrent callers queue in
order and sleep outside the lock. The clock is injected; the bucket itself never sleeps.
"""

from __future__ import annotations

import threading

from worker_chart_export.core.clock import Clock


class TokenBucket:
    """`rate` tokens per second, at most `burst` banked; starts full."""

    def __init__(self, rate: float, burst: int, *, clock: Clock) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._updated = clock.monotonic()

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        self._updated = now

    def wait_time(self) -> float:
        """Seconds until a token would be free (0 when one is free now); reserves nothing."""
        with self._lock:
            self._refill(self._clock.monotonic())
            return self._deficit_wait()

    def try_acquire(self) -> bool:
        """Take a token only if one is free right now."""
        with self._lock:
            self._refill(self._clock.monotonic())
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def reserve(self, max_wait: float) -> float | None:
        """Book the next token if it is free within `max_wait` seconds.

        Returns the wait before the caller may send (0.0 when free now), or None, booking
        nothing, when the slot is further away than `max_wait`.
        """
        with self._lock:
            self._refill(self._clock.monotonic())
            wait = self._deficit_wait()
            if wait > max_wait:
                return None
            self._tokens -= 1.0
            return wait

    def _deficit_wait(self) -> float:
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate
