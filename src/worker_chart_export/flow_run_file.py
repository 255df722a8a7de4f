"""Reading a local flow_run JSON file for the CLI's commands (run-local, advance), and the
error they exit 2 with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad flags, unreadable input files, unusable configuration: exit status 2."""


def read_flow_run(path: Path, flag: str = "--flow-run-path") -> dict[str, Any]:
    """The flow_run at `path`, checked enough to be run: an object with a runId and steps.
    Problems name `flag`, the option the path came from."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise UsageError(f"{flag} {path}: a flow_run must be a JSON object")
    if not isinstance(document.get("runId"), str) or not document["runId"]:
        raise UsageError(f"{flag} {path}: the flow_run has no runId")
    if not isinstance(document.get("steps"), dict):
        raise UsageError(f"{flag} {path}: steps must be a map of stepId to step")
    return document
