"""execute_step on the local adapters, with faults injected around them."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.builders import REPO, chart_step, flow_run
from harness.logs import picked
from harness.naming_contract import request_sha256
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import LocalArtifactStore, LocalFlowRunStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import (
    ArtifactWriteError,
    ClaimContended,
    FinalizeFailed,
    RedeliverEvent,
    TransientStoreError,
)
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.step.step_rules import LEASE_SAFETY_MARGIN, RunVersion
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ClaimResult, ClaimStatus
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.testing import FakeClock

# the defaults' request timeout (300 s) with a short finalize budget
LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=2)


@dataclass
class World:
    tmp: Path
    source: Path
    store: LocalFlowRunStore
    artifacts: LocalArtifactStore
    ports: Ports

    def step(self, step_id: str = "charts") -> dict[str, Any]:
        return self.store.read()["steps"][step_id]

    def manifest(self, step_id: str = "charts") -> dict[str, Any]:
        path = self.tmp / "gcs" / "bkt" / "charts" / "run1" / step_id / "manifest.json"
        return json.loads(path.read_text())


def make_world(tmp_path: Path, doc: dict[str, Any], **port_overrides: Any) -> World:
    source = tmp_path / "flow_run.json"
    source.write_text(json.dumps(doc))
    store = LocalFlowRunStore(source, tmp_path / "state.json")
    artifacts = LocalArtifactStore(tmp_path / "gcs", "bkt")
    ports = Ports(
        flow_runs=port_overrides.get("flow_runs", store),
        templates=port_overrides.get("templates", LocalTemplateSource(REPO / "chart-templates")),
        artifacts=port_overrides.get("artifacts", artifacts),
        chart_api=port_overrides.get(
            "chart_api", MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))
        ),
    )
    return World(tmp_path, source, store, artifacts, ports)


def test_success_writes_pngs_manifest_and_finalizes(tmp_path: Path, log_capture: Any) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=FakeClock())
    assert report.outcome == "SUCCEEDED" and report.items_count == 3 and report.failures_count == 0
    step = world.step()
    assert step["status"] == "SUCCEEDED" and step["attempt"] == 1 and "error" not in step
    assert step["outputs"]["outputsManifestGcsUri"] == "gs://bkt/charts/run1/charts/manifest.json"
    assert step["startedAt"] == "2026-11-22T10:00:00.000Z" and step["finishedAt"]
    manifest = world.manifest()
    for item in manifest["items"]:
        local = tmp_path / "gcs" / item["png_gcs_uri"].removeprefix("gs://")
        assert local.read_bytes().startswith(b"\x89PNG")
    messages = [line["message"] for line in log_capture.lines()]
    for expected in (
        "claim succeeded",
        "chart api call started",
        "chart api call finished",
        "manifest written",
        "step completed",
    ):
        assert expected in messages
    assert all(line["runId"] == "run1" and line["stepId"] == "charts" for line in log_capture.lines())
    # what an operator reads of the step in the logs, field by field
    mock = {"mode": "mock"}  # every line of the step names the chart API it runs against
    [claimed] = log_capture.events("claim succeeded")
    assert picked(claimed, "chartsApi", "attempt", "flowKey", "durationMs") == {
        "chartsApi": mock,
        "attempt": 1,
        "flowKey": "test_flow",
        "durationMs": 0.0,
    }
    uri = "gs://bkt/charts/run1/charts/manifest.json"
    [written] = log_capture.events("manifest written")
    assert picked(written, "chartsApi", "gcsUri", "itemsCount", "failuresCount", "minImages") == {
        "chartsApi": mock,
        "gcsUri": uri,
        "itemsCount": 3,
        "failuresCount": 0,
        "minImages": 2,
    }
    [completed] = log_capture.events("step completed")
    fields = ("chartsApi", "status", "error", "itemsCount", "failuresCount", "minImages")
    assert picked(completed, *fields, "outputsManifestGcsUri", "finalized") == {
        "chartsApi": mock,
        "status": "SUCCEEDED",
        "error": None,
        "itemsCount": 3,
        "failuresCount": 0,
        "minImages": 2,
        "outputsManifestGcsUri": uri,
        "finalized": True,
    }
    assert (report.manifest_uri, report.min_images, report.finalized) == (uri, 2, True)
    assert (report.run_id, report.message, report.error_code) == ("run1", "", None)


def test_second_execution_is_a_claim_conflict_noop(tmp_path: Path, log_capture: Any) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}))
    execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    before = world.store.read()
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "NOOP" and report.error_code == "STEP_CLAIM_CONFLICT"
    assert world.store.read() == before
    reason = "step charts is SUCCEEDED, not READY"
    said = (report.run_id, report.step_id, report.charts_api_mode, report.message)
    assert said == ("run1", "charts", "mock", reason)
    [noop] = log_capture.events("claim not taken: no-op")
    assert picked(noop, "code", "reason") == {"code": "STEP_CLAIM_CONFLICT", "reason": reason}


def test_a_run_that_is_gone_is_a_flow_run_not_found_noop(tmp_path: Path, log_capture: Any) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=GoneRunStore())
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=FakeClock())
    assert (report.outcome, report.error_code) == ("NOOP", "FLOW_RUN_NOT_FOUND")
    assert report.message == "flow_run run1 does not exist"
    [noop] = log_capture.events("claim not taken: no-op")
    assert picked(noop, "code", "reason") == {"code": "FLOW_RUN_NOT_FOUND", "reason": report.message}


class GoneRunStore:
    """A run deleted before its claim: every claim finds no document."""

    def claim_step(self, run_id: str, step_id: str, **_: Any) -> ClaimResult:
        return ClaimResult(ClaimStatus.NOT_FOUND, f"flow_run {run_id} does not exist")


@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED", "FAILED", "PENDING"])
def test_step_not_ready_is_never_touched(tmp_path: Path, status: str) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step(status=status)}))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "NOOP"
    assert not world.store.state.exists()  # nothing was ever written
    assert not (tmp_path / "gcs").exists()


def test_partial_failures_and_min_images_decide(tmp_path: Path, log_capture: Any) -> None:
    # BROKENUSDT has an error fixture only for price_psar_adi_v1; the other two have no fixture at all.
    doc = flow_run({"charts": chart_step()}, symbol="BROKENUSDT")
    world = make_world(tmp_path, doc)
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.items_count == 0 and report.failures_count == 3
    step = world.step()
    assert step["status"] == "FAILED"
    assert step["error"]["code"] == "CHART_API_MOCK_MISSING"  # 2 missing beat 1 CHART_API_FAILED
    assert step["error"]["details"] == {
        "itemsCount": 0,
        "minImages": 2,
        "requestedCount": 3,
        "failureCodes": {"CHART_API_FAILED": 1, "CHART_API_MOCK_MISSING": 2},
    }
    assert step["outputs"]["outputsManifestGcsUri"].endswith("/manifest.json")  # kept for diagnostics
    codes = [f["error"]["code"] for f in world.manifest()["failures"]]
    assert codes == ["CHART_API_FAILED", "CHART_API_MOCK_MISSING", "CHART_API_MOCK_MISSING"]
    # what `run-local` prints and the log says of the failed step
    assert report.to_summary() == {
        "status": "FAILED",
        "runId": "run1",
        "stepId": "charts",
        "outputsManifestGcsUri": "gs://bkt/charts/run1/charts/manifest.json",
        "itemsCount": 0,
        "failuresCount": 3,
        "minImages": 2,
        "chartsApiMode": "mock",
        "errorCode": "CHART_API_MOCK_MISSING",
        "message": step["error"]["message"],
    }
    assert step["error"]["message"].startswith("0 of 3 charts rendered, fewer than minImages=2")
    [completed] = log_capture.events("step completed")
    assert completed["error"] == {"code": "CHART_API_MOCK_MISSING", "message": step["error"]["message"]}


def test_min_images_zero_succeeds_even_with_no_image(tmp_path: Path) -> None:
    step = chart_step()
    step["inputs"]["minImages"] = 0
    world = make_world(tmp_path, flow_run({"charts": step}, symbol="ETHUSDT"))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "SUCCEEDED" and report.items_count == 0 and report.failures_count == 3


def test_validation_failure_finalizes_failed_without_writing_artifacts(
    tmp_path: Path, log_capture: Any
) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step(timeframe="7h")}))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "VALIDATION_FAILED"
    step = world.step()
    assert step["status"] == "FAILED" and "steps.charts.timeframe" in step["error"]["message"]
    assert not (tmp_path / "gcs").exists()
    [invalid] = log_capture.events("step inputs invalid")  # says what the step records
    assert picked(invalid, "severity", "chartsApi", "error") == {
        "severity": "WARNING",
        "chartsApi": {"mode": "mock"},
        "error": step["error"],
    }


def test_run_id_escaping_the_prefix_fails_validation_and_writes_nothing(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}, run_id="../../etc"))
    report = execute_step("../../etc", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "VALIDATION_FAILED"
    assert world.step()["status"] == "FAILED"
    assert not (tmp_path / "gcs").exists() and not (tmp_path.parent / "etc").exists()


class FailingArtifacts:
    def __init__(self, inner: LocalArtifactStore, *, png: bool = False, manifest: bool = False) -> None:
        self.inner, self.png, self.manifest_fails, self.bucket = inner, png, manifest, inner.bucket

    def check_bucket(self) -> None:
        self.inner.check_bucket()

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        if self.png:
            raise ArtifactWriteError(f"gs://bkt/{object_path}: HTTP 503 after 4 attempts")
        return self.inner.create_png(object_path, data, metadata=metadata)

    def put_manifest(self, object_path: str, data: bytes, **fence: Any) -> str:
        if self.manifest_fails:
            raise ArtifactWriteError(f"gs://bkt/{object_path}: HTTP 503 after 4 attempts")
        return self.inner.put_manifest(object_path, data, **fence)


def test_png_write_failures_are_gcs_write_failed(tmp_path: Path) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    world = make_world(
        tmp_path, flow_run({"charts": chart_step()}), artifacts=FailingArtifacts(base.artifacts, png=True)
    )
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "GCS_WRITE_FAILED"
    assert {f["error"]["code"] for f in world.manifest()["failures"]} == {"GCS_WRITE_FAILED"}


def test_manifest_write_failure_fails_the_step_without_manifest_uri(tmp_path: Path, log_capture: Any) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    world = make_world(
        tmp_path,
        flow_run({"charts": chart_step()}),
        artifacts=FailingArtifacts(base.artifacts, manifest=True),
    )
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "MANIFEST_WRITE_FAILED"
    step = world.step()
    assert step["status"] == "FAILED" and "outputs" not in step
    cause = "gs://bkt/charts/run1/charts/manifest.json: HTTP 503 after 4 attempts"
    error = {
        "code": "MANIFEST_WRITE_FAILED",
        "message": f"manifest could not be written: {cause}",
        "details": {"itemsCount": 3, "failuresCount": 0, "minImages": 2},
    }
    assert step["error"] == error
    assert (report.items_count, report.failures_count, report.min_images) == (3, 0, 2)
    [line] = log_capture.events("manifest write failed")
    assert (line["severity"], line["error"]) == ("ERROR", error)


class ChartApiDouble:
    """A ChartApi that reserves nothing ahead and is its own session; subclasses answer `render`."""

    mode = "mock"

    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> AbstractContextManager[Any]:
        return nullcontext(self)


class WaveRecordingChartApi(ChartApiDouble):
    """Records the first wave it is asked for, and which renders ran inside it."""

    def __init__(self) -> None:
        self.waves: list[list[str]] = []
        self.in_wave = False
        self.rendered_in_wave: list[bool] = []
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        self.waves.append([c.chart_template_id for c in first_wave])
        self.in_wave = True
        try:
            yield self
        finally:
            self.in_wave = False

    def render(self, call: ChartCall) -> ChartResult:
        self.rendered_in_wave.append(self.in_wave)
        return self.inner.render(call)


def test_the_first_wave_is_reserved_around_the_renders(tmp_path: Path) -> None:
    chart_api = WaveRecordingChartApi()
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=chart_api)
    limits = dataclasses.replace(LIMITS, chart_concurrency=2)
    report = execute_step("run1", "charts", ports=world.ports, limits=limits, clock=SYSTEM_CLOCK)
    requested = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]
    assert len(requested) > 2 and report.outcome == "SUCCEEDED"
    assert chart_api.waves == [requested[:2]]  # one wave: as many as run at once
    assert chart_api.rendered_in_wave == [True] * len(requested) and not chart_api.in_wave


class CrashingChartApi(ChartApiDouble):
    def render(self, call: ChartCall) -> ChartResult:
        raise KeyError("a defect")


def test_unexpected_crash_is_recorded_then_raised(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=CrashingChartApi())
    with pytest.raises(KeyError):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    step = world.step()
    assert step["status"] == "FAILED" and step["error"]["code"] == "WORKER_INTERNAL_ERROR"


class SlowChartApi(ChartApiDouble):
    """Renders from the fixtures, but holds `slow_template` until released; when that chart
    starts, it moves the clock `seconds` on (the step then runs out of time while it is held)."""

    def __init__(self, slow_template: str, clock: FakeClock, seconds: float) -> None:
        self.slow_template, self.clock, self.seconds = slow_template, clock, seconds
        self.release = threading.Event()
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))

    def render(self, call: ChartCall) -> ChartResult:
        if call.chart_template_id == self.slow_template:
            self.clock.advance(self.seconds)
            self.release.wait(60)  # let go once the step has ended
        return self.inner.render(call)


# One chart at a time, for an hour: charts get 3599 s (3600.3 - 0.3 finalize - 1.0 kept for
# the manifest), which a held chart moves a FakeClock through.
ONE_THREAD_AN_HOUR = dataclasses.replace(
    StepLimits.within_request(request_timeout_seconds=3600.3, finalize_budget_seconds=0.3),
    chart_concurrency=1,
)


def test_chart_still_running_when_budget_ends_is_a_failure_not_a_hang(
    tmp_path: Path, log_capture: Any
) -> None:
    """The step's time is its clock's: the held chart (the last, on one thread, so the others
    are done) moves the clock to the end of the charts' time, and the step gives it up then,
    not after an hour of wall time."""
    clock = FakeClock()
    api = SlowChartApi("momentum_rsi_macd_v1", clock, 3599.0)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=api)
    try:
        report = execute_step("run1", "charts", ports=world.ports, limits=ONE_THREAD_AN_HOUR, clock=clock)
    finally:
        api.release.set()
    assert report.outcome == "SUCCEEDED" and report.items_count == 2 and report.failures_count == 1
    [failure] = world.manifest()["failures"]
    assert failure["error"] == {
        "code": "CHART_API_FAILED",
        "message": "the step's time budget (3600s) ran out before momentum_rsi_macd_v1 was rendered",
        "details": {
            "reason": "STEP_BUDGET_EXHAUSTED",
            "fixtureKey": "BINANCE_BTCUSDT__1h__momentum_rsi_macd_v1",
        },
    }
    [abandoned] = log_capture.events("chart abandoned: step budget exhausted")
    assert (abandoned["severity"], abandoned["chartTemplateId"]) == ("WARNING", "momentum_rsi_macd_v1")


def test_a_chart_done_a_moment_before_the_budget_ends_is_kept(tmp_path: Path) -> None:
    """The clock stops one millisecond short of the charts' end while the last chart runs: it
    is done within the budget and listed."""
    clock = FakeClock()
    api = SlowChartApi("momentum_rsi_macd_v1", clock, 3598.999)
    api.release.set()
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=api)
    report = execute_step("run1", "charts", ports=world.ports, limits=ONE_THREAD_AN_HOUR, clock=clock)
    assert report.outcome == "SUCCEEDED" and report.items_count == 3 and report.failures_count == 0


@dataclass
class FlakyFinalizeStore:
    inner: LocalFlowRunStore
    failures_left: int
    calls: list[str] = field(default_factory=list)

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("finalize")
        if self.failures_left:
            self.failures_left -= 1
            raise TransientStoreError("finalize: 503 Service Unavailable")
        return self.inner.finalize_step(*args, **kwargs)


def test_transient_finalize_errors_are_retried_within_budget(tmp_path: Path) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    flaky = FlakyFinalizeStore(base.store, failures_left=2)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=flaky)
    clock = FakeClock()
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=clock)
    assert report.outcome == "SUCCEEDED" and report.finalized
    assert len(flaky.calls) == 3 and len(clock.sleeps) == 2
    assert base.store.read()["steps"]["charts"]["status"] == "SUCCEEDED"


def test_finalize_budget_exhausted_fails_the_invocation_loudly(tmp_path: Path, log_capture: Any) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    flaky = FlakyFinalizeStore(base.store, failures_left=10_000)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=flaky)
    clock = FakeClock()
    with pytest.raises(FinalizeFailed, match="could not be finalized within 2s"):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=clock)
    assert sum(clock.sleeps) <= 2 + 5  # bounded by the budget plus at most one capped wait
    [event] = log_capture.events("finalize failed")
    assert event["severity"] == "ERROR" and event["error"]["code"] == "FIRESTORE_FINALIZE_FAILED"


@dataclass
class FenceCountingStore:
    inner: LocalFlowRunStore
    fence_reads: int = 0

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        self.fence_reads += 1
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.finalize_step(*args, **kwargs)


@pytest.mark.parametrize(
    ("request_timeout", "fence_reads"),
    [(300.0, 0), (LEASE_SAFETY_MARGIN.total_seconds() - 5, 1)],
    ids=["well-inside-the-lease", "lease-shorter-than-the-margin"],
)
def test_the_manifest_fence_reads_the_store_only_near_the_leases_end(
    tmp_path: Path, request_timeout: float, fence_reads: int
) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    counting = FenceCountingStore(base.store)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=counting)
    limits = StepLimits.within_request(request_timeout_seconds=request_timeout, finalize_budget_seconds=2)

    report = execute_step("run1", "charts", ports=world.ports, limits=limits, clock=SYSTEM_CLOCK)

    assert report.outcome == "SUCCEEDED" and report.manifest_uri is not None
    assert counting.fence_reads == fence_reads


class UnavailableStore:
    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        raise TransientStoreError("claim: 503 Service Unavailable")

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("finalize must not run when nothing was claimed")


def test_claim_store_unavailable_asks_for_redelivery(tmp_path: Path, log_capture: Any) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=UnavailableStore())
    with pytest.raises(RedeliverEvent, match="could not reach the store"):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    [failed] = log_capture.events("claim failed")  # the store's own words, as UnavailableStore says them
    error = {"code": "FIRESTORE_CLAIM_FAILED", "message": "claim: 503 Service Unavailable"}
    assert picked(failed, "severity", "chartsApi", "error") == {
        "severity": "ERROR",
        "chartsApi": {"mode": "mock"},
        "error": error,
    }


@dataclass
class SlowClaimStore:
    """The local store, each claim taking `seconds` of the FakeClock's time."""

    inner: LocalFlowRunStore
    clock: FakeClock
    seconds: float

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        self.clock.advance(self.seconds)
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.finalize_step(*args, **kwargs)


def test_the_claims_duration_is_logged_in_milliseconds_to_a_tenth(tmp_path: Path, log_capture: Any) -> None:
    clock = FakeClock()
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    slow = SlowClaimStore(base.store, clock, seconds=0.01234)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=slow)
    first = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=clock)
    again = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=clock)
    assert (first.outcome, again.outcome) == ("SUCCEEDED", "NOOP")
    [claimed] = log_capture.events("claim succeeded")
    [refused] = log_capture.events("claim not taken: no-op")
    assert claimed["durationMs"] == refused["durationMs"] == 12.3  # 12.34 ms each


@dataclass
class RefusalWithTheRunStore:
    """Refuses the claim and hands back the run it read with the refusal (a ClaimResult may
    carry a document whatever its status)."""

    document: dict[str, Any]

    def claim_step(self, run_id: str, step_id: str, **_: Any) -> ClaimResult:
        return ClaimResult(ClaimStatus.CONFLICT, f"step {step_id} is RUNNING, not READY", self.document)

    def claim_is_current(self, *args: Any) -> bool:
        raise AssertionError("nothing was claimed: there is no manifest to fence")

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("finalize must not run when nothing was claimed")


def test_a_refused_claim_that_carries_the_run_is_still_a_noop(tmp_path: Path, log_capture: Any) -> None:
    document = flow_run({"charts": chart_step()})
    chart_api = WaveRecordingChartApi()
    world = make_world(tmp_path, document, flow_runs=RefusalWithTheRunStore(document), chart_api=chart_api)
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=FakeClock())
    assert (report.outcome, report.error_code) == ("NOOP", "STEP_CLAIM_CONFLICT")
    assert report.message == "step charts is RUNNING, not READY"
    assert chart_api.waves == [] and chart_api.rendered_in_wave == []  # no quota, no call
    assert not (tmp_path / "gcs").exists() and log_capture.events("claim succeeded") == []


@dataclass
class LeaselessClaimStore:
    """Claims through the local store but answers with the run alone, no Claim (a
    ClaimResult's `claim` is optional): neither the attempt nor the lease is known."""

    inner: LocalFlowRunStore
    fence_reads: int = 0

    def claim_step(self, *args: Any, **kwargs: Any) -> ClaimResult:
        return dataclasses.replace(self.inner.claim_step(*args, **kwargs), claim=None)

    def claim_is_current(self, *args: Any) -> bool:
        self.fence_reads += 1
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.finalize_step(*args, **kwargs)


def test_a_claim_without_its_lease_runs_the_step_and_fences_the_manifest_by_a_read(
    tmp_path: Path, log_capture: Any
) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    leaseless = LeaselessClaimStore(base.store)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=leaseless)
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=FakeClock())
    assert (report.outcome, report.items_count, report.finalized) == ("SUCCEEDED", 3, True)
    assert leaseless.fence_reads == 1  # no lease known: the store says whether the step is still ours
    assert base.store.read()["steps"]["charts"]["status"] == "SUCCEEDED"
    [claimed] = log_capture.events("claim succeeded")
    assert picked(claimed, "attempt", "flowKey") == {"attempt": None, "flowKey": "test_flow"}


@dataclass
class SeenRecordingStore:
    """Passes everything to the local store, recording the version each claim was given."""

    inner: LocalFlowRunStore
    seen: list[RunVersion | None] = field(default_factory=list)

    def claim_step(self, *args: Any, seen: RunVersion | None = None, **kwargs: Any) -> Any:
        self.seen.append(seen)
        return self.inner.claim_step(*args, seen=seen, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.finalize_step(*args, **kwargs)


def test_the_events_version_is_what_the_claim_is_planned_from(tmp_path: Path, log_capture: Any) -> None:
    document = flow_run({"charts": chart_step()})
    base = make_world(tmp_path, document)
    recording = SeenRecordingStore(base.store)
    world = make_world(tmp_path, document, flow_runs=recording)
    seen = RunVersion(document, FakeClock().now())

    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, seen=seen, clock=SYSTEM_CLOCK)
    again = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)

    assert report.outcome == "SUCCEEDED" and again.error_code == "STEP_CLAIM_CONFLICT"
    assert recording.seen == [seen, None]  # run-local and the CLI have none: the store reads
    claimed = log_capture.events("claim succeeded")[0]
    refused = log_capture.events("claim not taken: no-op")[0]
    assert isinstance(claimed["durationMs"], float) and isinstance(refused["durationMs"], float)


class StillReadyStore:
    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        raise ClaimContended("claim of charts: the step is still READY after 5 commits")

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("finalize must not run when nothing was claimed")


def test_a_claim_still_ready_after_its_tries_asks_for_redelivery(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=StillReadyStore())
    with pytest.raises(RedeliverEvent, match="still READY"):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)


def test_previous_attempt_error_is_cleared_on_a_new_claim(tmp_path: Path) -> None:
    step = chart_step(attempt=2, error={"code": "CHART_API_FAILED", "message": "old"}, finishedAt="x")
    world = make_world(tmp_path, flow_run({"charts": step}))
    execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    state = world.step()
    assert state["attempt"] == 3 and "error" not in state and state["status"] == "SUCCEEDED"


@dataclass
class RefusingFinalizeStore:
    """Refuses results it cannot store (as Firestore does a too-large document) a number of times."""

    inner: LocalFlowRunStore
    refusals_left: int
    finals: list[Any] = field(default_factory=list)

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.inner.claim_is_current(*args)

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: Any) -> Any:
        self.finals.append(final)
        if self.refusals_left:
            self.refusals_left -= 1
            raise ValueError("400 maximum entity size is 1048576 bytes")
        return self.inner.finalize_step(run_id, step_id, token=token, final=final)


def test_result_refused_by_the_store_is_replaced_by_a_bare_failure(tmp_path: Path, log_capture: Any) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    refusing = RefusingFinalizeStore(base.store, refusals_left=1)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=refusing)
    execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    step = base.store.read()["steps"]["charts"]
    assert step["status"] == "FAILED" and step["error"]["code"] == "FIRESTORE_FINALIZE_FAILED"
    assert (
        "(SUCCEEDED) could not be recorded: ValueError: 400 maximum entity size" in step["error"]["message"]
    )
    assert [f.status.value for f in refusing.finals] == ["SUCCEEDED", "FAILED"]
    [refused] = log_capture.events("finalize refused: recording a bare failure instead")
    reason = "ValueError: 400 maximum entity size is 1048576 bytes"
    assert (refused["severity"], refused["intendedStatus"]) == ("ERROR", "SUCCEEDED")
    assert refused["error"] == {"code": "FIRESTORE_FINALIZE_FAILED", "message": reason}


def test_store_refusing_even_the_bare_failure_fails_loudly(tmp_path: Path, log_capture: Any) -> None:
    base = make_world(tmp_path, flow_run({"charts": chart_step()}))
    refusing = RefusingFinalizeStore(base.store, refusals_left=2)
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), flow_runs=refusing)
    with pytest.raises(FinalizeFailed, match="could not be finalized"):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    [failed] = log_capture.events("finalize failed")
    reason = "ValueError: 400 maximum entity size is 1048576 bytes"
    assert failed["severity"] == "ERROR"
    assert failed["error"] == {"code": "FIRESTORE_FINALIZE_FAILED", "message": reason}


def test_outputs_of_the_wrong_shape_do_not_strand_the_step(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step(outputs=[1])}))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "SUCCEEDED"
    assert world.step()["outputs"] == {"outputsManifestGcsUri": "gs://bkt/charts/run1/charts/manifest.json"}


class InterruptingChartApi(ChartApiDouble):
    def render(self, call: ChartCall) -> ChartResult:
        raise KeyboardInterrupt


def test_interrupt_finalizes_the_step_failed_before_propagating(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=InterruptingChartApi())
    with pytest.raises(KeyboardInterrupt):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    step = world.step()
    assert step["status"] == "FAILED" and step["error"]["code"] == "WORKER_INTERNAL_ERROR"
    assert "KeyboardInterrupt" in step["error"]["message"]


def test_crash_message_names_the_cause(tmp_path: Path, log_capture: Any) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=CrashingChartApi())
    with pytest.raises(KeyError):
        execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert world.step()["error"]["message"] == "the worker failed unexpectedly: KeyError: 'a defect'"
    [crashed] = log_capture.events("step crashed")  # with the traceback an operator debugs from
    assert picked(crashed, "severity", "chartsApi", "error") == {
        "severity": "ERROR",
        "chartsApi": {"mode": "mock"},
        "error": {"code": "WORKER_INTERNAL_ERROR"},
    }
    assert crashed["exception"].endswith("KeyError: 'a defect'")


def test_cancelled_budget_has_no_time_left() -> None:
    budget = Budget.starting_now(60, FakeClock())
    assert budget.remaining() == 60.0
    budget.cancel()
    assert budget.remaining() == 0.0 and budget.expired()


def test_budget_ending_earlier_shares_cancellation() -> None:
    budget = Budget.starting_now(100, FakeClock())
    earlier = budget.ending_earlier(20)
    assert earlier.remaining() == 80.0
    budget.cancel()
    assert earlier.remaining() == 0.0


class BudgetRecordingChartApi(ChartApiDouble):
    def __init__(self) -> None:
        self.remaining: list[float] = []
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))

    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> AbstractContextManager[Any]:
        self.budget = budget  # the step's charts render within it
        return nullcontext(self)

    def render(self, call: ChartCall) -> ChartResult:
        self.remaining.append(self.budget.remaining())
        return self.inner.render(call)


def test_charts_leave_time_for_the_manifest(tmp_path: Path) -> None:
    api = BudgetRecordingChartApi()
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=api)
    limits = StepLimits.within_request(request_timeout_seconds=300, finalize_budget_seconds=30)
    execute_step("run1", "charts", ports=world.ports, limits=limits, clock=FakeClock())
    assert api.remaining == [250.0, 250.0, 250.0]  # 300 - 30 finalize reserve - 20 manifest reserve


# --- the run document and the manifest are exits: no form of a key leaves through them

ECHOED_KEY = 'ex/"key\\with+odd%chars=0123456789abcdef'


class KeyEchoingChartApi(ChartApiDouble):
    """Fails each chart with words that hold a key (as a careless provider, or an exception
    that slipped past the chart API's own redaction, would)."""

    def render(self, call: ChartCall) -> ChartResult:
        from harness.secret_scan import key_forms

        forms = list(key_forms(ECHOED_KEY).values())
        error = StepError(ErrorCode.CHART_API_FAILED, f"refused {forms[0]}", {"message": forms[3], "n": 1})
        return ChartFailure(error)


class KeyCrashingChartApi(ChartApiDouble):
    def render(self, call: ChartCall) -> ChartResult:
        raise RuntimeError(f"the provider said {ECHOED_KEY[:12]}")


def test_a_key_in_a_failure_or_a_crash_never_reaches_the_run_or_the_manifest(tmp_path: Path) -> None:
    from harness.secret_scan import leaks
    from worker_chart_export import known_keys

    known_keys.learn([ECHOED_KEY])
    world = make_world(tmp_path, flow_run({"charts": chart_step()}), chart_api=KeyEchoingChartApi())
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.failures_count == 3
    failures = world.manifest()["failures"]
    assert {f["error"]["message"] for f in failures} == {"refused <redacted>"}
    assert {f["error"]["details"]["n"] for f in failures} == {1}
    (tmp_path / "crash").mkdir()
    crashed = make_world(
        tmp_path / "crash", flow_run({"charts": chart_step()}), chart_api=KeyCrashingChartApi()
    )
    with pytest.raises(RuntimeError):
        execute_step("run1", "charts", ports=crashed.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert (
        crashed.step()["error"]["message"]
        == "the worker failed unexpectedly: RuntimeError: the provider said <redacted>"
    )
    written = [p.read_text() for p in tmp_path.rglob("*.json") if p.name != "flow_run.json"]
    assert len(written) >= 3 and leaks(written, [ECHOED_KEY]) == []


class RecordingPool(ThreadPoolExecutor):
    """The render pool, recording how it was sized, named and shut down."""

    made: ClassVar[list[RecordingPool]] = []

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "", **options: Any) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix, **options)
        self.asked = {"max_workers": max_workers, "thread_name_prefix": thread_name_prefix, **options}
        self.shutdowns: list[dict[str, Any]] = []
        RecordingPool.made.append(self)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.shutdowns.append({"wait": wait, "cancel_futures": cancel_futures})
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


@pytest.mark.parametrize(("concurrency", "requests", "workers"), [(2, 3, 2), (8, 3, 3), (1, 1, 1)])
def test_a_step_renders_on_at_most_chart_concurrency_threads_and_leaves_late_charts_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int, requests: int, workers: int
) -> None:
    """CHART_CONCURRENCY bounds one step's renders (no more threads than charts); the pool's
    threads are named for a traceback, and it is shut down without waiting for late charts,
    cancelling those that never started."""
    import worker_chart_export.service.render as render_module

    monkeypatch.setattr(render_module, "ThreadPoolExecutor", RecordingPool)
    monkeypatch.setattr(RecordingPool, "made", [])
    step = chart_step()
    step["inputs"]["requests"] = step["inputs"]["requests"][:requests]
    step["inputs"]["minImages"] = 1
    world = make_world(tmp_path, flow_run({"charts": step}))
    limits = dataclasses.replace(LIMITS, chart_concurrency=concurrency)
    report = execute_step("run1", "charts", ports=world.ports, limits=limits, clock=FakeClock())
    assert report.outcome == "SUCCEEDED" and report.items_count == requests
    [pool] = RecordingPool.made
    assert pool.asked == {"max_workers": workers, "thread_name_prefix": "chart"}
    assert pool.shutdowns == [{"wait": False, "cancel_futures": True}]


def test_run_local_on_a_run_without_a_ready_step_reports_a_noop(tmp_path: Path, log_capture: Any) -> None:
    from worker_chart_export.service.local_run import choose_local_step, execute_chosen_step
    from worker_chart_export.service.step_context import StepReport

    doc = flow_run({"charts": chart_step(status="PENDING")})
    world = make_world(tmp_path, doc)
    report = execute_chosen_step(
        choose_local_step(doc, None), ports=world.ports, limits=LIMITS, clock=FakeClock()
    )
    assert report == StepReport(
        "run1",
        "",
        "NOOP",
        "mock",
        error_code="NO_READY_STEP",
        message="no READY CHART_EXPORT step in the flow_run",
    )
    [noop] = log_capture.events("no READY CHART_EXPORT step: no-op")
    assert picked(noop, "runId", "code") == {"runId": "run1", "code": "NO_READY_STEP"}
    assert not world.store.state.exists()


class BodyRecordingChartApi(ChartApiDouble):
    """The mock CHART-IMG, keeping the body each chart was asked with."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict[str, Any]] = {}
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))

    def render(self, call: ChartCall) -> ChartResult:
        self.bodies[call.chart_template_id] = call.body
        return self.inner.render(call)


def test_a_template_without_a_timezone_is_rendered_in_the_default_timezone_setting(tmp_path: Path) -> None:
    """CHARTS_DEFAULT_TIMEZONE (StepLimits.default_timezone) goes into the body of every chart
    whose template names none, and so into the digest its manifest item carries."""
    template_id = "price_psar_adi_v1"
    stored = json.loads((REPO / "chart-templates" / f"{template_id}.json").read_text())
    del stored["request"]["timezone"]
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / f"{template_id}.json").write_text(json.dumps(stored))
    step = chart_step(inputs={"minImages": 1, "requests": [{"chartTemplateId": template_id}]})
    chart_api = BodyRecordingChartApi()
    world = make_world(
        tmp_path,
        flow_run({"charts": step}),
        templates=LocalTemplateSource(tmp_path / "templates"),
        chart_api=chart_api,
    )
    limits = dataclasses.replace(LIMITS, default_timezone="America/New_York")
    report = execute_step("run1", "charts", ports=world.ports, limits=limits, clock=FakeClock())
    assert report.outcome == "SUCCEEDED"
    assert chart_api.bodies[template_id]["timezone"] == "America/New_York"
    [item] = world.manifest()["items"]
    assert item["meta"]["requestDigest"] == request_sha256(chart_api.bodies[template_id])  # of what was sent


def test_a_step_failed_before_rendering_reports_no_items_and_no_failures(tmp_path: Path) -> None:
    world = make_world(tmp_path, flow_run({"charts": chart_step(timeframe="7h")}))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert (report.outcome, report.items_count, report.failures_count) == ("FAILED", 0, 0)


def test_a_manifest_write_failure_reports_the_failed_charts_too(tmp_path: Path) -> None:
    doc = flow_run({"charts": chart_step()}, symbol="BROKENUSDT")  # no chart renders: 3 failures
    base = make_world(tmp_path, doc)
    world = make_world(tmp_path, doc, artifacts=FailingArtifacts(base.artifacts, manifest=True))
    report = execute_step("run1", "charts", ports=world.ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.error_code == "MANIFEST_WRITE_FAILED"
    assert (report.items_count, report.failures_count, report.min_images) == (0, 3, 2)
    assert world.step()["error"]["details"] == {"itemsCount": 0, "failuresCount": 3, "minImages": 2}
