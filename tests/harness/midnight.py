"""Keeps a test that writes "today's" usage out of the seconds before UTC midnight.

Some tests write an account's usage dated today and then let a worker that reads the system
clock (another process, or the CLI in this one) read it back. If UTC midnight passes between
the two, the worker rightly treats the count as yesterday's and the test's expectation is
wrong, not the code. Such a test asks for enough of the day left before it writes anything;
in the rare window before midnight it waits for the new day. The wait decides no result: it
only moves the test to a moment when "today" means one day for its whole length.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# The longest such test under load (an outage e2e beside two CPU burners) takes well under
# this; a test that needs more says so.
DEFAULT_ROOM = timedelta(minutes=10)


def utc_now() -> datetime:
    return datetime.now(UTC)


def seconds_to_midnight(now: datetime) -> float:
    next_midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (next_midnight - now).total_seconds()


def now_with_room_in_the_day(
    room: timedelta = DEFAULT_ROOM,
    *,
    now: Callable[[], datetime] = utc_now,
    sleep: Callable[[float], None] = time.sleep,
) -> datetime:
    """The current UTC time, at least `room` before the next midnight (waiting past midnight
    if there is less)."""
    current = now()
    left = seconds_to_midnight(current)
    if left < room.total_seconds():
        sleep(left + 1.0)
        current = now()
    return current
