"""Stopping the services the tests start, each in a session (process group) of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process_group(
    process: subprocess.Popen[bytes] | subprocess.Popen[str], *, grace: float = 5.0
) -> None:
    """SIGTERM to the whole group (the JVM, gunicorn and its workers...), SIGKILL after `grace`."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
