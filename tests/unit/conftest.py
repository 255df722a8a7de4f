"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import tenacity.nap

from harness.builders import SAMPLE_FLOW_RUN, load_templates


class _NoRealTime:
    """Stands for `time` in tenacity's own sleep (tenacity.nap.sleep), its default `sleep=`."""

    @staticmethod
    def sleep(seconds: float) -> None:
        pytest.fail(f"a tenacity retry slept {seconds}s of real time: its sleep= is not the injected clock's")


@pytest.fixture(autouse=True)
def _retries_sleep_on_the_injected_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every retry of ours sleeps on the clock it was given (`sleep=clock.sleep`). One that
    fell back to tenacity's default would sleep real time, and under a FakeClock, whose
    budget then never ends, for ever: it fails at its first sleep instead (pytest.fail, which
    no `except Exception` of the code swallows). mutmut's mutants dropping a `sleep=` are
    then killed at once, not timed out."""
    monkeypatch.setattr(tenacity.nap, "time", _NoRealTime)


# A hang guard only: a late chart ends as soon as its test lets its held answer go.
LATE_CHART_GUARD_SECONDS = 120.0


@pytest.fixture(autouse=True)
def _no_chart_outlives_its_test() -> Iterator[None]:
    """A chart a step gave up on may still finish in the background (service/render.py: its
    PNG is simply not listed). Its late log lines and writes belong to its own test, not to
    the next one's log capture, which a busy machine (or mutmut's order) can make it reach:
    the next test starts once the render threads ("chart_N") have ended."""
    yield
    wait_for_late_charts(LATE_CHART_GUARD_SECONDS)


def wait_for_late_charts(guard_seconds: float) -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("chart_"):
            thread.join(guard_seconds)
            assert not thread.is_alive(), f"{thread.name} still rendering after its test"


@pytest.fixture
def sample_flow_run() -> dict[str, Any]:
    return json.loads(SAMPLE_FLOW_RUN.read_text())


@pytest.fixture
def templates() -> dict[str, dict[str, Any]]:
    return load_templates()
