"""What a CLI command prints leaves redacted: no form of a key the process holds (known_keys)
reaches stdout or stderr, whatever printed it (a summary, a report, an error line naming an
exception). Keys become known as the command loads its accounts; CHART_IMG_ACCOUNTS_JSON's
are learnt first, so a command that never loads accounts (`view`, `templates sync`) redacts
them too. A Secret Manager secret is read only by the commands that need the accounts."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from worker_chart_export import known_keys
from worker_chart_export.environment import CHART_IMG_ACCOUNTS_JSON


class RedactingWriter:
    """A text stream whose every write is redacted first; the rest is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(known_keys.redaction().text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def learn_configured_keys() -> None:
    """The keys of CHART_IMG_ACCOUNTS_JSON, when it parses (a command that needs the accounts
    reports a problem with them itself)."""
    from worker_chart_export.adapters.accounts_config import parse_accounts
    from worker_chart_export.core.exceptions import ConfigError

    text = os.environ.get(CHART_IMG_ACCOUNTS_JSON, "")
    if text.strip():
        with contextlib.suppress(ConfigError):
            parse_accounts(text)  # learns its keys


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """sys.stdout and sys.stderr redacted for the block."""
    learn_configured_keys()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingWriter(stdout), RedactingWriter(stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
