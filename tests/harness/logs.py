"""Captures the worker's JSON log lines so tests can assert on events and scan for secrets."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from harness.secret_scan import scan_text
from worker_chart_export.logs import configure_logging


class LogCapture:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.strip()]

    def events(self, message: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("message") == message]


@pytest.fixture
def log_capture(request: pytest.FixtureRequest) -> Iterator[LogCapture]:
    capture = LogCapture()
    configure_logging(service="worker-chart-export", env="test", stream=capture.stream)
    yield capture
    configure_logging(service="worker-chart-export", env="test")
    scan_text(capture.text, f"{request.node.nodeid} [log_capture]")


def picked(line: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """These fields of a log line, to compare field by field; a field missing fails the test."""
    return {key: line[key] for key in keys}
