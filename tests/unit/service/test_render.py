"""Rendering a step's charts (service/render.py) as an operator and a reader of the manifest
meet it: each chart's "chart api call started/finished" lines (contract §10), field by field,
with the FakeClock making their durations exact; the manifest's items and failures; and the
PNG that could not be written. One chart at a time (chart_concurrency=1), so the clock each
chart moves is its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.builders import REPO, chart_step_for, flow_run
from harness.logs import LogCapture, picked
from harness.naming_contract import request_sha256
from worker_chart_export.adapters.local import LocalArtifactStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import ArtifactWriteError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.testing import FakeClock
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

LIMITS = dataclasses.replace(
    StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=2), chart_concurrency=1
)
SYMBOL, INTERVAL = "BINANCE:BTCUSDT", "1h"  # what flow_run's BTCUSDT and chart_step's 1h become
DRAWN, REFUSED, UNSTORED = "price_psar_adi_v1", "price_ema_volume_v1", "momentum_rsi_macd_v1"
# how long CHART-IMG takes for each chart, on the step's clock
TAKES = {DRAWN: 1.23456, REFUSED: 0.04321, UNSTORED: 2.5}
PNGS = {DRAWN: b"\x89PNG\r\n\x1a\n drawn", UNSTORED: b"\x89PNG\r\n\x1a\n not stored"}
REFUSAL = StepError(ErrorCode.CHART_API_FAILED, "CHART-IMG answered 500", {"httpStatus": 500})
WRITE_ERROR = "HTTP 503 after 4 attempts"


@dataclasses.dataclass
class TimedChartApi:
    """CHART-IMG taking TAKES[template] seconds of the clock per chart, drawing PNGS[template]
    or refusing with REFUSAL; remembers the bodies it was sent."""

    clock: FakeClock
    mode: str = "real"
    sent: dict[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        yield self

    def render(self, call: ChartCall) -> ChartResult:
        self.sent[call.chart_template_id] = call.body
        self.clock.advance(TAKES[call.chart_template_id])
        png = PNGS.get(call.chart_template_id)
        return ChartFailure(REFUSAL) if png is None else ChartSuccess(png)


class UnstoringArtifacts(LocalArtifactStore):
    """The local bucket, which cannot store UNSTORED's PNG (GCS gave up on it)."""

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        if object_path.endswith(f"_{UNSTORED}.png"):
            raise ArtifactWriteError(WRITE_ERROR)
        return super().create_png(object_path, data, metadata=metadata)


@dataclasses.dataclass
class Rendered:
    """A step of the three charts run through execute_step, and what it left."""

    clock: FakeClock
    chart_api: TimedChartApi
    bucket: Path
    logs: LogCapture

    def lines(self, message: str, template: str) -> list[dict[str, Any]]:
        return [line for line in self.logs.events(message) if line.get("chartTemplateId") == template]

    def manifest(self) -> dict[str, Any]:
        path = self.bucket / "bkt" / "charts" / "run1" / "charts" / "manifest.json"
        return dict(json.loads(path.read_text()))


def rendered(tmp_path: Path, logs: LogCapture) -> Rendered:
    clock = FakeClock()
    chart_api = TimedChartApi(clock)
    steps = {"charts": chart_step_for([DRAWN, REFUSED, UNSTORED], min_images=1)}
    bucket = tmp_path / "gcs"
    ports = Ports(
        flow_runs=InMemoryFlowRuns({"run1": flow_run(steps)}),
        templates=LocalTemplateSource(REPO / "chart-templates"),
        artifacts=UnstoringArtifacts(bucket, "bkt"),
        chart_api=chart_api,
    )
    report = execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=clock)
    assert (report.outcome, report.items_count, report.failures_count) == ("SUCCEEDED", 1, 2)
    return Rendered(clock, chart_api, bucket, logs)


def api_of(template: str) -> dict[str, str]:
    """The chartsApi field of a chart's lines: the mode and the fixture it would be recorded as."""
    return {"mode": "real", "fixtureKey": f"BINANCE_BTCUSDT__1h__{template}"}


def test_each_chart_says_what_it_asked_what_it_got_and_how_long_it_took(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    step = rendered(tmp_path, log_capture)
    for template in (DRAWN, REFUSED, UNSTORED):
        [started] = step.lines("chart api call started", template)
        assert picked(started, "severity", "runId", "stepId", "chartsApi", "symbol", "interval") == {
            "severity": "INFO",
            "runId": "run1",
            "stepId": "charts",
            "chartsApi": api_of(template),
            "symbol": SYMBOL,
            "interval": INTERVAL,
        }
    # durations in ms to a tenth: 1.23456 s is 1234.6 ms, 0.04321 s 43.2 ms, 2.5 s 2500.0 ms
    finished = {
        DRAWN: {"severity": "INFO", "status": "succeeded", "durationMs": 1234.6, "bytes": len(PNGS[DRAWN])},
        REFUSED: {
            "severity": "WARNING",
            "status": "failed",
            "durationMs": 43.2,
            "error": {"code": "CHART_API_FAILED", "message": REFUSAL.message, "details": {"httpStatus": 500}},
        },
        # written, though its PNG could not be stored: the call itself succeeded
        UNSTORED: {
            "severity": "INFO",
            "status": "succeeded",
            "durationMs": 2500.0,
            "bytes": len(PNGS[UNSTORED]),
        },
    }
    for template, expected in finished.items():
        [line] = step.lines("chart api call finished", template)
        assert picked(line, "chartsApi", *expected) == {"chartsApi": api_of(template), **expected}


def test_a_chart_not_rendered_or_not_stored_is_a_failure_that_says_why(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    step = rendered(tmp_path, log_capture)
    # came back at 10:00:00 + 1.23456 + 0.04321 + 2.5 s = 10:00:03.777 (FakeClock's start)
    path = "charts/run1/charts/20261122T100003777Z_BINANCE-BTCUSDT_1h_momentum_rsi_macd_v1.png"
    write_failure = {
        "code": "GCS_WRITE_FAILED",
        "message": f"PNG could not be written: {WRITE_ERROR}",
        "details": {"objectPath": path},
    }
    [write_failed] = log_capture.events("png write failed")
    assert picked(write_failed, "severity", "chartTemplateId", "chartsApi", "error") == {
        "severity": "ERROR",
        "chartTemplateId": UNSTORED,
        "chartsApi": api_of(UNSTORED),
        "error": write_failure,
    }
    assert step.manifest()["failures"] == [
        {"request": {"chartTemplateId": REFUSED}, "error": REFUSAL.to_dict()},
        {"request": {"chartTemplateId": UNSTORED}, "error": write_failure},
    ]


def test_a_stored_chart_is_listed_with_its_templates_description_symbol_and_request(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    step = rendered(tmp_path, log_capture)
    template = json.loads((REPO / "chart-templates" / f"{DRAWN}.json").read_text())
    # came back at 10:00:00 + 1.23456 s (FakeClock's start), kept to the millisecond
    path = "charts/run1/charts/20261122T100001234Z_BINANCE-BTCUSDT_1h_price_psar_adi_v1.png"
    assert step.manifest()["items"] == [
        {
            "chartTemplateId": DRAWN,
            "kind": template["description"],
            "generatedAt": "2026-11-22T10:00:01.234Z",
            "png_gcs_uri": f"gs://bkt/{path}",
            # of the very body CHART-IMG was sent
            "meta": {"chartImgSymbol": SYMBOL, "requestDigest": request_sha256(step.chart_api.sent[DRAWN])},
        }
    ]
    assert (step.bucket / "bkt" / path).read_bytes() == PNGS[DRAWN]
