"""A time budget measured on the injected clock's monotonic time, so tests control it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from worker_chart_export.core.clock import Clock


@dataclass(frozen=True)
class Budget:
    expires_at: float
    clock: Clock
    # set by cancel(): work still running (render threads, retries) sees no time left
    _cancelled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @classmethod
    def starting_now(cls, seconds: float, clock: Clock) -> Budget:
        return cls(expires_at=clock.monotonic() + seconds, clock=clock)

    def remaining(self) -> float:
        if self._cancelled.is_set():
            return 0.0
        return max(0.0, self.expires_at - self.clock.monotonic())

    def cancel(self) -> None:
        self._cancelled.set()

    def ending_earlier(self, seconds: float) -> Budget:
        """A budget that ends `seconds` sooner and is cancelled together with this one."""
        return Budget(self.expires_at - seconds, self.clock, self._cancelled)

    def expired(self) -> bool:
        return self.remaining() <= 0.0
