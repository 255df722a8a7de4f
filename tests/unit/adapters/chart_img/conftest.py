"""The `rig` fixture: a chart API over a scripted transport and a FakeClock (scripted.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.chart_img_server import connections_all_free, find_secrets
from harness.logs import LogCapture
from unit.adapters.chart_img.scripted import KEYS, Answer, Rig, make_rig


@pytest.fixture
def rig(log_capture: LogCapture, tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(answers: list[Answer], **options: Any) -> Rig:
        made.append(make_rig(answers, log_capture, tmp_path / "fixtures", **options))
        return made[-1]

    yield make
    assert not find_secrets([log_capture.text], KEYS.values())
    assert all(connections_all_free(r.api) for r in made), "an attempt kept its connection permit"
