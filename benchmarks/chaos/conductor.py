"""The schedule applied as time passes: each window's start and end become an action on the
stand-in, the emulator, an instance or a template, each in a thread of its own (an edit
waiting on a paused Firestore must not hold the pause's own end back), the end of a window
after its start. Each action is recorded with the wall-clock moment it took effect, which is
what the counting compares the steps' lives with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from chaos.fleet import ChaosStack
from chaos.schedule import Kind, Schedule, Window

FAULT_504_DELAY_SECONDS = 2.0  # a gateway's timeout answer comes late (compressed, as the schedule)


@dataclass
class Applied:
    """A window as it happened: when its start and end took effect (wall clock)."""

    window: Window
    started: datetime | None = None
    ended: datetime | None = None
    errors: list[str] = field(default_factory=list)

    def span(self) -> tuple[datetime, datetime] | None:
        if self.started is None:
            return None
        return self.started, self.ended or self.started


def _actions(stack: ChaosStack, window: Window) -> tuple[Callable[[], None], Callable[[], None] | None]:
    """(what starts the window, what ends it, or None for an instant)."""
    stand_in = stack.stand_in
    assert stand_in is not None
    name = window.name
    table: dict[Kind, tuple[Callable[[], None], Callable[[], None] | None]] = {
        Kind.REFUSE: (lambda: stand_in.control("refuse", window=name), lambda: stand_in.control("accept")),
        Kind.OUTAGE: (lambda: stand_in.control("refuse", window=name), lambda: stand_in.control("accept")),
        Kind.THROTTLE: (
            lambda: stand_in.control("throttle", window=name),
            lambda: stand_in.control("throttle", window=None),
        ),
        Kind.FAULT_500: (
            lambda: stand_in.control("fault", status=500, window=name),
            lambda: stand_in.control("fault", status=None, window=name),
        ),
        Kind.FAULT_504: (
            lambda: stand_in.control("fault", status=504, window=name, delay=FAULT_504_DELAY_SECONDS),
            lambda: stand_in.control("fault", status=None, window=name),
        ),
        Kind.KEY_EXHAUSTED: (lambda: stand_in.control("exhaust", account=window.target, window=name), None),
        Kind.TEMPLATE_401: (
            lambda: stand_in.control("refuse_template", template=window.target, window=name),
            None,
        ),
        Kind.TEMPLATE_EDIT: (lambda: _edit(stack, window), None),
        Kind.FIRESTORE_PAUSE: (stack.pause_firestore, stack.resume_firestore),
        Kind.INSTANCE_KILL: (lambda: stack.kill(window.target), lambda: _restart(stack, window.target)),
    }
    return table[window.kind]


def _edit(stack: ChaosStack, window: Window) -> None:
    stack.edit_template(window.target, window.number, window.name)


def _restart(stack: ChaosStack, name: str) -> None:
    stack.restart(name)


class Conductor:
    def __init__(self, stack: ChaosStack, schedule: Schedule) -> None:
        self.stack = stack
        self.schedule = schedule
        self.applied = {w.name: Applied(w) for w in schedule.windows}
        self._threads: list[threading.Thread] = []
        self._started: dict[str, threading.Thread] = {}
        self._stopping = threading.Event()
        self._runner: threading.Thread | None = None

    def apply_now(self, kinds: tuple[Kind, ...]) -> None:
        """Start the windows of these kinds that begin at 0 right away (before the traffic)."""
        for window in self.schedule.windows:
            if window.kind in kinds and window.start == 0:
                self._do(window, "start")

    def start(self, origin: float) -> None:
        """Follow the schedule from `origin` (time.monotonic() of its second 0)."""
        self._runner = threading.Thread(target=self._run, args=(origin,), name="conductor", daemon=True)
        self._runner.start()

    def _run(self, origin: float) -> None:
        for moment, edge, window in self.schedule.actions():
            if self._stopping.wait(max(0.0, origin + moment - time.monotonic())):
                return
            applied = self.applied[window.name]
            if edge == "start" and applied.started is not None:
                continue  # applied before the traffic (apply_now)
            before = self._started.get(window.name) if edge == "end" else None
            thread = threading.Thread(target=self._after, args=(before, window, edge), daemon=True)
            thread.start()
            self._threads.append(thread)
            if edge == "start":
                self._started[window.name] = thread

    def _after(self, before: threading.Thread | None, window: Window, edge: str) -> None:
        if before is not None:
            before.join()
        self._do(window, edge)

    def _do(self, window: Window, edge: str) -> None:
        start, end = _actions(self.stack, window)
        action = start if edge == "start" else end
        applied = self.applied[window.name]
        try:
            if action is not None:
                action()
        except Exception as exc:  # recorded and printed: the run goes on, as bad luck does
            applied.errors.append(f"{edge}: {type(exc).__name__}: {exc}")
        moment = datetime.now(UTC)
        if edge == "start":
            applied.started = moment
        else:
            applied.ended = moment

    def finish(self, timeout: float = 60.0) -> None:
        """Wait for the schedule's last action (the schedule ends before the settling)."""
        if self._runner is not None:
            self._runner.join(timeout=timeout)
        for thread in self._threads:
            thread.join(timeout=timeout)

    def stop(self) -> None:
        self._stopping.set()
