"""A retried step lists what an earlier execution of it wrote and pays CHART-IMG only for
the rest (service/reuse.py), on the local adapters: one listing, n - k calls, the manifest
listing the reused PNGs with their own URI and generatedAt."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from harness.builders import REPO, chart_step, flow_run
from harness.logs import LogCapture
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import LocalArtifactStore, LocalFlowRunStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import ArtifactListError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import png_object_path
from worker_chart_export.core.types import ChartCall, ChartResult
from worker_chart_export.service.execute import StepReport, execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.testing import FakeClock

LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=2)
TEMPLATES = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]  # three


class CountingChartApi:
    """The mock CHART-IMG, counting the calls and the chart sessions opened."""

    mode = "mock"

    def __init__(self) -> None:
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))
        self.rendered: list[str] = []  # in the order the step's threads got to them
        self.sessions = 0

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        self.sessions += 1
        yield self

    def render(self, call: ChartCall) -> ChartResult:
        self.rendered.append(call.chart_template_id)
        return self.inner.render(call)


class ListingArtifacts:
    """The local bucket, counting listings (or refusing them)."""

    def __init__(self, inner: LocalArtifactStore, *, refuse: bool = False) -> None:
        self.inner, self.refuse, self.bucket = inner, refuse, inner.bucket
        self.listings: list[tuple[str, str]] = []

    def create_png(self, object_path: str, data: bytes) -> str:
        return self.inner.create_png(object_path, data)

    def list_objects(self, prefix: str, *, start_offset: str = "") -> list[str]:
        self.listings.append((prefix, start_offset))
        if self.refuse:
            raise ArtifactListError(f"listing gs://bkt/{prefix} failed after 4 attempts: HTTP 503")
        return self.inner.list_objects(prefix, start_offset=start_offset)

    def put_manifest(self, object_path: str, data: bytes, **fence: Any) -> str:
        return self.inner.put_manifest(object_path, data, **fence)


@dataclasses.dataclass
class Retry:
    tmp: Path
    store: LocalFlowRunStore
    local: LocalArtifactStore
    artifacts: ListingArtifacts
    charts: CountingChartApi
    clock: FakeClock

    def earlier_png(self, template: str, seconds_ago: float) -> str:
        """A PNG the dead execution wrote, as it named it."""
        moment = self.clock.now() - timedelta(seconds=seconds_ago)
        path = png_object_path("run1", "charts", moment, "BINANCE:BTCUSDT", "1h", template)
        return self.local.create_png(path, b"\x89PNG\r\n\x1a\n earlier")

    def run(self, limits: StepLimits = LIMITS) -> StepReport:
        ports = Ports(self.store, LocalTemplateSource(REPO / "chart-templates"), self.artifacts, self.charts)
        return execute_step("run1", "charts", ports=ports, limits=limits, clock=self.clock)

    def manifest(self) -> dict[str, Any]:
        path = self.tmp / "gcs" / "bkt" / "charts" / "run1" / "charts" / "manifest.json"
        manifest: dict[str, Any] = json.loads(path.read_text())
        return manifest


def retry_of(tmp_path: Path, *, attempt: int = 1, refuse_listing: bool = False, **step: Any) -> Retry:
    """A step the reaper made READY again after `attempt` executions (the next claim is attempt + 1)."""
    source = tmp_path / "flow_run.json"
    source.write_text(json.dumps(flow_run({"charts": chart_step(attempt=attempt, **step)})))
    local = LocalArtifactStore(tmp_path / "gcs", "bkt")
    store = LocalFlowRunStore(source, tmp_path / "state.json")
    return Retry(
        tmp_path,
        store,
        local,
        ListingArtifacts(local, refuse=refuse_listing),
        CountingChartApi(),
        FakeClock(),
    )


def test_a_retry_renders_only_the_charts_the_dead_execution_did_not_write(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    retry = retry_of(tmp_path)
    earlier = {t: retry.earlier_png(t, seconds_ago=120) for t in TEMPLATES[:2]}  # k = 2 of n = 3

    report = retry.run()

    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    assert sorted(retry.charts.rendered) == sorted(TEMPLATES[2:])  # n - k calls
    assert len(retry.artifacts.listings) == 1  # one listing of the step's folder
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    for template, uri in earlier.items():
        assert items[template]["png_gcs_uri"] == uri and items[template]["meta"]["reused"] is True
        assert items[template]["generatedAt"] == "2026-11-22T09:58:00.000Z"
    assert "reused" not in items[TEMPLATES[2]]["meta"]
    reused = log_capture.events("chart reused")
    assert sorted(line["chartTemplateId"] for line in reused) == sorted(earlier)
    assert {line["ageSeconds"] for line in reused} == {120.0}


def test_a_retry_that_finds_every_chart_opens_no_chart_session(tmp_path: Path) -> None:
    retry = retry_of(tmp_path, attempt=2)
    for template in TEMPLATES:
        retry.earlier_png(template, seconds_ago=5)
    report = retry.run()
    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    assert retry.charts.rendered == [] and retry.charts.sessions == 0  # no quota reserved


def test_a_first_attempt_does_not_list(tmp_path: Path) -> None:
    retry = retry_of(tmp_path, attempt=0)  # the claim makes it attempt 1
    retry.earlier_png(TEMPLATES[0], seconds_ago=5)  # not an earlier execution's: none can exist
    assert retry.run().outcome == "SUCCEEDED"
    assert retry.artifacts.listings == [] and sorted(retry.charts.rendered) == sorted(TEMPLATES)


def test_pngs_older_than_the_window_are_rendered_again(tmp_path: Path) -> None:
    retry = retry_of(tmp_path)
    retry.earlier_png(TEMPLATES[0], seconds_ago=LIMITS.chart_reuse_max_age_seconds + 1)
    retry.earlier_png(TEMPLATES[1], seconds_ago=LIMITS.chart_reuse_max_age_seconds)
    assert retry.run().outcome == "SUCCEEDED"
    assert sorted(retry.charts.rendered) == sorted([TEMPLATES[0], TEMPLATES[2]])


def test_reuse_turned_off_lists_nothing_and_renders_every_chart(tmp_path: Path) -> None:
    retry = retry_of(tmp_path)
    for template in TEMPLATES:
        retry.earlier_png(template, seconds_ago=5)
    assert retry.run(dataclasses.replace(LIMITS, chart_reuse_max_age_seconds=0)).outcome == "SUCCEEDED"
    assert retry.artifacts.listings == [] and sorted(retry.charts.rendered) == sorted(TEMPLATES)
    assert all("reused" not in item["meta"] for item in retry.manifest()["items"])


def test_a_listing_that_fails_costs_only_the_saving(tmp_path: Path, log_capture: LogCapture) -> None:
    retry = retry_of(tmp_path, refuse_listing=True)
    retry.earlier_png(TEMPLATES[0], seconds_ago=5)
    report = retry.run()
    assert report.outcome == "SUCCEEDED" and sorted(retry.charts.rendered) == sorted(TEMPLATES)
    (warning,) = log_capture.events("earlier charts not listed: rendering every chart")
    assert "HTTP 503" in warning["error"]["message"] and warning["severity"] == "WARNING"
