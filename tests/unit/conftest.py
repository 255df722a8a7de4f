"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN, load_templates


@pytest.fixture
def sample_flow_run() -> dict[str, Any]:
    return json.loads(SAMPLE_FLOW_RUN.read_text())


@pytest.fixture
def templates() -> dict[str, dict[str, Any]]:
    return load_templates()
