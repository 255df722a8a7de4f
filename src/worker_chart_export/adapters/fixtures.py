"""Recorded CHART-IMG responses on disk: the mock-mode ChartApi and the store record mode uses.

Layout (contract §12.2): <root>/chart-img/<endpoint>/<key>.png for a 200, and
<key>__<status>_<REASON>.json holding {"status": int, "body": {...}} for an error; the
endpoint's folder is advanced-chart-v2 (an Advanced Chart) or layout-chart-v2 (a layout
chart: core.naming.FIXTURE_DIRS), so the same symbol, timeframe and template id on two
endpoints never share a fixture.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import failure_from_response, mock_missing
from worker_chart_export.core.naming import (
    ERROR_FIXTURE_NAME,
    FIXTURE_DIRS,
    FIXTURE_PROVIDER_DIR,
    error_fixture_name,
    success_fixture_name,
)
from worker_chart_export.core.types import ChartCall, ChartEndpoint, ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.logs import get_logger


@dataclass(frozen=True)
class RecordedError:
    http_status: int
    body: Any
    file_name: str


Recorded = bytes | RecordedError


ADVANCED = ChartEndpoint.ADVANCED_CHART


class FixtureLibrary:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / FIXTURE_PROVIDER_DIR  # the Advanced Chart's

    def folder(self, endpoint: ChartEndpoint = ADVANCED) -> Path:
        """Where the fixtures of `endpoint`'s answers are."""
        return self.root / FIXTURE_DIRS[endpoint]

    def lookup(self, key: str, endpoint: ChartEndpoint = ADVANCED) -> Recorded | None:
        """The success PNG if present, else the error fixture for this key, else None."""
        folder = self.folder(endpoint)
        png = folder / success_fixture_name(key)
        if png.is_file():
            return png.read_bytes()
        for candidate in sorted(folder.glob(f"{key}__*.json")):
            match = ERROR_FIXTURE_NAME.fullmatch(candidate.name)
            if match and match.group("key") == key:
                recorded = json.loads(candidate.read_text(encoding="utf-8"))
                status = recorded.get("status") if isinstance(recorded, dict) else None
                if not isinstance(status, int):
                    raise ValueError(f"fixture {candidate} has no integer 'status'")
                return RecordedError(status, recorded.get("body"), candidate.name)
        return None

    def save_png(self, key: str, png: bytes, endpoint: ChartEndpoint = ADVANCED) -> Path:
        path = self.folder(endpoint) / success_fixture_name(key)
        self._write(path, png)
        return path

    def save_error(
        self, key: str, http_status: int, body: Any, reason: str, endpoint: ChartEndpoint = ADVANCED
    ) -> Path:
        path = self.folder(endpoint) / error_fixture_name(key, http_status, reason)
        payload = json.dumps({"status": http_status, "body": body}, indent=2) + "\n"
        self._write(path, payload.encode("utf-8"))
        return path

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)


def replay(recorded: Recorded) -> ChartResult:
    if isinstance(recorded, bytes):
        return ChartSuccess(png=recorded)
    return ChartFailure(
        failure_from_response(recorded.http_status, recorded.body, fixture=recorded.file_name)
    )


class MockChartApi:
    """Mode `mock`: never opens a connection; answers from the fixture library only."""

    mode = "mock"

    def __init__(self, library: FixtureLibrary) -> None:
        self.library = library

    def for_step(
        self, first_wave: Sequence[ChartCall], budget: Budget
    ) -> AbstractContextManager[MockChartApi]:
        """Its own session: fixtures cost no quota and take no time, so a step has nothing
        to reserve or remember."""
        return nullcontext(self)

    def render(self, call: ChartCall) -> ChartResult:
        log = get_logger().bind(
            chartTemplateId=call.chart_template_id,
            chartsApi={"mode": self.mode, "fixtureKey": call.fixture_key},
        )
        recorded = self.library.lookup(call.fixture_key, call.endpoint)
        if recorded is None:
            failure = ChartFailure(mock_missing(call.fixture_key, self.library.folder(call.endpoint)))
            log.warning("chart api fixture missing", error={"code": failure.error.code.value})
            return failure
        result = replay(recorded)
        return result
