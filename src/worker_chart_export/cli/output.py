"""What a CLI command prints leaves redacted: no form of a key the process holds (known_keys)
reaches stdout or stderr, whatever printed it (a summary, a report, an error line naming an
exception, a library's logging or traceback). Keys become known as the command loads its
accounts; CHART_IMG_ACCOUNTS_JSON's (and CHART_IMG_SESSIONS_JSON's TradingView sessions) are
learnt first, so a command that never loads them (`view`, `templates sync`) redacts them too.
A Secret Manager secret is read only by the commands that need it.

`serve` runs inside it too, so the served process has no unredacted exit on its streams:
gunicorn's error log, Flask's, a library's warning or traceback (each writes to sys.stderr,
looked up when its handler is made or when it writes, so after the wrap) and the forked
gunicorn worker, which inherits the wrapped streams. Bytes written to file descriptors 1
and 2 directly (C code such as gRPC's core) are beyond any Python stream.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from worker_chart_export import known_keys
from worker_chart_export.environment import CHART_IMG_ACCOUNTS_JSON, CHART_IMG_SESSIONS_JSON


class RedactingWriter:
    """A text stream that writes whole lines, each redacted first; the rest (fileno, isatty,
    encoding...) is the stream's own.

    Whole lines, so a key a writer sends in pieces (a line printed in parts) is found in the
    line they make; text without a line end is held until the next line end or a flush.
    Thread-safe: gunicorn's threads, logging handlers and print share one writer.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending = ""
        self._lock = threading.Lock()
        _WRITERS.add(self)

    def write(self, text: str) -> int:
        with self._lock:
            pending = self._pending + text
            cut = pending.rfind("\n") + 1
            self._pending = pending[cut:]
            if cut:
                self._stream.write(known_keys.redaction().text(pending[:cut]))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.write_pending()
        self._stream.flush()

    def write_pending(self) -> None:
        """What is held of an unfinished line, written (redacted) now."""
        with self._lock:
            if self._pending:
                self._stream.write(known_keys.redaction().text(self._pending))
                self._pending = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _after_fork_in_child(self) -> None:
        # a thread of the parent may have held the lock when it forked (gunicorn's worker)
        self._lock = threading.Lock()


_WRITERS: weakref.WeakSet[RedactingWriter] = weakref.WeakSet()


def unwrapped(stream: TextIO) -> TextIO:
    """The stream a RedactingWriter writes to (`stream` itself when it is none): for logs.py's
    lines, redacted already, value by value so that each stays one JSON object; a second pass
    would cost each line another sieve and never find anything."""
    return stream._stream if isinstance(stream, RedactingWriter) else stream


def _reinit_locks_after_fork() -> None:
    for writer in list(_WRITERS):
        writer._after_fork_in_child()


os.register_at_fork(after_in_child=_reinit_locks_after_fork)


def learn_configured_keys() -> None:
    """The keys of CHART_IMG_ACCOUNTS_JSON and the sessions of CHART_IMG_SESSIONS_JSON, when
    they parse (a command that needs them reports a problem with them itself)."""
    from worker_chart_export.bootstrap.commands import parse_accounts, parse_sessions
    from worker_chart_export.core.exceptions import ConfigError

    for variable, parse in (
        (CHART_IMG_ACCOUNTS_JSON, parse_accounts),
        (CHART_IMG_SESSIONS_JSON, parse_sessions),
    ):
        text = os.environ.get(variable, "")
        if text.strip():
            with contextlib.suppress(ConfigError):
                parse(text)  # learns its secrets


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """sys.stdout and sys.stderr redacted for the block."""
    learn_configured_keys()
    stdout, stderr = sys.stdout, sys.stderr
    writers = RedactingWriter(stdout), RedactingWriter(stderr)
    sys.stdout, sys.stderr = writers
    try:
        yield
    finally:
        for writer in writers:
            writer.write_pending()  # what is left of an unfinished line
        sys.stdout, sys.stderr = stdout, stderr
