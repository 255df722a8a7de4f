"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN, load_templates
from worker_chart_export.logs import configure_logging


@pytest.fixture(autouse=True)
def _logging_on_this_tests_stdout() -> None:
    """Each test starts with the worker's logging on the stdout pytest gives it now. A test
    that ran the CLI leaves structlog printing to that test's own captured stream, closed once
    the test ended: the next test to log would fail on it, in any order but the files' own
    (`mutmut` runs a mutant's tests in another order)."""
    configure_logging(service="worker-chart-export", env="test")


@pytest.fixture
def sample_flow_run() -> dict[str, Any]:
    return json.loads(SAMPLE_FLOW_RUN.read_text())


@pytest.fixture
def templates() -> dict[str, dict[str, Any]]:
    return load_templates()
