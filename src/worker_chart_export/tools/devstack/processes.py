"""The stack's child processes: each in a session (process group) of its own, stopped by
group, so a JVM under a wrapper or gunicorn's worker under its master goes with it.

Every child is started with start_new_session=True and its output goes to a log file (a
pipe nobody drains would block it). `Supervisor.stop_all` sends SIGTERM to every group,
waits, then SIGKILLs what is left: nothing the stack started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STOP_GRACE_SECONDS = 5.0


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

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

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
        if self.alive():
            self.kill(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        self.kill(signal.SIGKILL)  # the leader may be gone and a member still there
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._wait_until_group_gone(timeout=5)

    def _wait_until_group_gone(self, timeout: float) -> None:
        """A killed member (a gunicorn worker) may outlive its leader by a moment: the stack
        returns only once no process of the group is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@dataclass
class Supervisor:
    """Starts children under `log_dir` and stops them all, newest first."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)
    on_start: Callable[[Child], None] | None = None

    def start(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(command),
                env=dict(env) if env is not None else None,
                stdin=stdin,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = Child(name, process, log_path)
        self.children.append(child)
        if self.on_start is not None:
            self.on_start(child)
        return child

    def forget(self, child: Child) -> None:
        if child in self.children:
            self.children.remove(child)

    def session_ids(self) -> list[int]:
        return [child.pid for child in self.children]

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            child.stop()


def wait_for(
    condition: Callable[[], bool],
    *,
    child: Child | None,
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> None:
    """Poll `condition` until true; StackError (with the child's log) when it exits or times out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if child is not None and not child.alive():
            raise StackError(
                f"{what}: {child.name} exited with {child.process.returncode}:\n{child.log_tail()}"
            )
        if time.monotonic() > deadline:
            tail = f":\n{child.log_tail()}" if child is not None else ""
            raise StackError(f"{what}: not ready after {timeout:.0f}s{tail}")
        time.sleep(interval)
