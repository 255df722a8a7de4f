"""The one clock: wall time, monotonic time and sleep, injected wherever time matters.

Everything that waits or measures takes a `Clock`, so a test can drive time by hand
(`worker_chart_export.testing.FakeClock`) and nothing sleeps for real under test.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall time: timestamps written to documents, the UTC-day usage window."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: budgets, durations, pacing."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
