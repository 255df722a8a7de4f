"""Helpers for tests and benchmarks, shipped with the package (as procrastinate ships its
in-memory connector): a clock driven by hand, and encoders that build Firestore events the
way Firestore does. Nothing in the service imports this module.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class FakeClock:
    """Wall time, monotonic time and sleep that move together, only when told to.

    `sleep` records what it was asked and advances time at once; `advance` moves time
    without recording a sleep.
    """

    MONOTONIC_START = 1000.0

    def __init__(self, start: datetime | None = None) -> None:
        self.start = start or datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
        self.elapsed = 0.0
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self.start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        with self._lock:
            return self.MONOTONIC_START + self.elapsed

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.elapsed += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.elapsed += seconds
