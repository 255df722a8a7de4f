"""Connection permits: one per connection of the CHART-IMG client's pool.

A chart attempt takes a permit BEFORE it reserves its quota unit and send slot, and gives
it back once the answer is read. So an attempt that holds a reservation always has its
connection: it never waits for one (a reserved slot would pass unused, the unit would age,
and the pool's wait would count against the call's own timeout). The pool is sized to
every chart the instance runs at once (docs/scaling.md, "Capacity of one instance"), so in
normal operation no attempt waits here either; the permits make that a rule rather than a
hope (late renders of an abandoned step, or fewer connections than threads, wait HERE,
before any reservation).
"""

from __future__ import annotations

import threading


class ConnectionPermits:
    """A counting semaphore that can also hand out "as many as are free" at once."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("ConnectionPermits needs at least one permit")
        self.size = size
        self._free = threading.BoundedSemaphore(size)  # releasing more than was taken is a bug: it raises
        self._lock = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Attempts blocked in acquire() right now."""
        with self._lock:
            return self._waiting

    def acquire(self, *, timeout: float) -> bool:
        """One permit, waiting at most `timeout` seconds for it; False if none freed up."""
        if self._free.acquire(blocking=False):
            return True
        with self._lock:
            self._waiting += 1
        try:
            return self._free.acquire(timeout=max(0.0, timeout))
        finally:
            with self._lock:
                self._waiting -= 1

    def take_available(self, wanted: int) -> int:
        """Up to `wanted` permits without waiting: how many were taken."""
        taken = 0
        while taken < wanted and self._free.acquire(blocking=False):
            taken += 1
        return taken

    def release(self, count: int = 1) -> None:
        if count > 0:
            self._free.release(count)
