"""The stack's child processes: each in a session (process group) of its own, stopped by
group, so a JVM under a wrapper or gunicorn's worker under its master goes with it.

Every child is started with start_new_session=True and its output goes to a log file (a
pipe nobody drains would block it). `Supervisor.stop_all` closes the supervisor (a start
still under way is refused, or its child is stopped with the rest: a start is registered
under the same lock), then stops the children in two waves, each all at once: first those
that use the others (the served functions: a request in flight still reaches the emulator
and ends, instead of retrying a dead one until gunicorn's graceful timeout), then the rest.
A wave sends SIGTERM to every group, waits up to STOP_GRACE_SECONDS for all of them
together, then SIGKILLs every group: nothing the stack started outlives it, and stopping
takes about two graces at most, not the sum of every child's.

`side_by_side` starts parts at once (the emulator and fake-gcs-server, say), each in a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STOP_GRACE_SECONDS = 2.0  # nothing in the stack keeps state worth a longer shutdown


class StackError(RuntimeError):
    """A part of the stack could not be started; the message says which and how to fix it."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


@dataclass
class Child:
    """One started process: its pid is also its process group and session id."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    uses_others: bool = False  # stopped in the first wave

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def last_words(self) -> str:
        """`; its log's last line: '...' (whole log: <path>)`, for a one-line error."""
        lines = [line.strip() for line in self.log_tail().splitlines() if line.strip()]
        last = f"; its log's last line: {lines[-1][:300]!r}" if lines else ""
        return f"{last} (whole log: {self.log_path})"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the whole group (a crash when SIGKILL: no graceful shutdown at all)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM to the group, SIGKILL after `grace`; also reaps any group member left
        behind after the leader exited."""
        stop_children([self], grace)

    def wait_until_group_gone(self, timeout: float) -> None:
        """A killed member (a gunicorn worker) may outlive its leader by a moment: the stack
        returns only once no process of the group is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def stop_children(children: Sequence[Child], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM to every group at once; wait up to `grace` (for all of them together); then
    SIGKILL every group, a leader already gone included (a member may outlive it), and wait
    until no process of any group is left."""
    for child in children:
        if child.alive():
            child.kill(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for child in children:
        child.kill(signal.SIGKILL)
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=5)
        child.wait_until_group_gone(timeout=5)


@dataclass
class Supervisor:
    """Starts children under `log_dir` and stops them all; once stopping, starts no more."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)
    on_start: Callable[[Child], None] | None = None
    closed: bool = False
    # held from Popen to the child's registration: stop_all sees every child ever started
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
        uses_others: bool = False,
    ) -> Child:
        """Start `command` in a session of its own, its output into <log_dir>/<name>.log;
        `uses_others`: it talks to other children (stopped before them)."""
        log_path = self.log_dir / f"{name}.log"
        with self._lock:
            if self.closed:
                raise StackError(f"{name} not started: the stack is stopping")
            with log_path.open("ab") as log:
                process = subprocess.Popen(
                    list(command),
                    env=dict(env) if env is not None else None,
                    stdin=stdin,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            child = Child(name, process, log_path, uses_others)
            self.children.append(child)
            if self.on_start is not None:  # announced before stop_all can see it
                self.on_start(child)
        return child

    def forget(self, child: Child) -> None:
        with self._lock:
            if child in self.children:
                self.children.remove(child)

    def session_ids(self) -> list[int]:
        return [child.pid for child in self.children]

    def stop_all(self) -> int:
        """Stop every child, in two waves (see the module); the number of process groups."""
        with self._lock:
            self.closed = True
            children = list(self.children)
        stop_children([child for child in children if child.uses_others])
        stop_children([child for child in children if not child.uses_others])
        return len(children)


def wait_for(
    condition: Callable[[], bool],
    *,
    child: Child | None,
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> None:
    """Poll `condition` until true; StackError (one line, naming the child's log) when the
    child exits or the time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        if child is not None and not child.alive():
            raise StackError(
                f"{what}: {child.name} exited with {child.process.returncode}{child.last_words()}"
            )
        if time.monotonic() > deadline:
            said = child.last_words() if child is not None else ""
            raise StackError(f"{what}: not ready after {timeout:.0f}s{said}")
        time.sleep(interval)


def side_by_side(*calls: Callable[[], object]) -> None:
    """Each call in a daemon thread of its own; returns when all are done, or raises the
    first failure at once (the caller stops the stack, which ends the others' waits).
    Daemon threads: a process that stops meanwhile does not wait for them."""
    failures: list[BaseException] = []
    remaining = [len(calls)]
    lock, finished = threading.Lock(), threading.Event()

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:
            failures.append(exc)
            finished.set()
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                finished.set()

    for call in calls:
        threading.Thread(target=run, args=(call,), daemon=True).start()
    finished.wait()
    if failures:
        raise failures[0]
