"""A time budget measured on an injected monotonic clock, so tests control time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MonotonicClock = Callable[[], float]


@dataclass(frozen=True)
class Budget:
    expires_at: float
    clock: MonotonicClock = time.monotonic

    @classmethod
    def starting_now(cls, seconds: float, clock: MonotonicClock = time.monotonic) -> Budget:
        return cls(expires_at=clock() + seconds, clock=clock)

    def remaining(self) -> float:
        return max(0.0, self.expires_at - self.clock())

    def expired(self) -> bool:
        return self.remaining() <= 0.0
