"""Issue 37 on the in-memory flow_runs (claim, lease, reaper) and the local bucket: a bad
window costs time, never the run. A step whose charts a window longer than its budget kept
from minImages waits (RUNNING, its lease moved to its retry moment), the reaper makes it
READY then, and its next attempt reuses every PNG already paid for; only what the request
caused, or a window longer than every attempt, ends it FAILED. A store that has a bad moment
after the charts were paid for is waited out within the budget, and then as the charts are.
Everything on a FakeClock: the waits are the clock's, nothing sleeps."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, chart_step_for, flow_run
from harness.logs import LogCapture
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import LocalArtifactStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import ArtifactWriteError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult
from worker_chart_export.service.execute import StepReport, execute_step
from worker_chart_export.service.local_run import choose_local_step, execute_chosen_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.reaper import reap_once
from worker_chart_export.testing import FakeClock
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

TEMPLATES = ["price_psar_adi_v1", "price_ema_volume_v1", "momentum_rsi_macd_v1"]
STEP_ATTEMPTS = 3
# a minute doubling, 3 attempts; a budget of 60 s a step (the request's 90 s less 30)
LIMITS = replace(
    StepLimits.within_request(request_timeout_seconds=90.0, finalize_budget_seconds=30.0),
    step_retries=Backoff(attempts=STEP_ATTEMPTS, base=60.0, cap=480.0),
)
OUTAGE = StepError(ErrorCode.CHART_API_FAILED, "CHART-IMG could not be reached (connection)", retryable=True)
REFUSED = StepError(ErrorCode.CHART_API_FAILED, "CHART-IMG answered HTTP 422: Invalid Symbol")


@dataclass
class WindowedCharts:
    """The mock CHART-IMG, failing the templates in `down` with `error` while they are there;
    every render counted (a call: what a user pays for)."""

    down: set[str] = field(default_factory=set)
    error: StepError = OUTAGE
    rendered: list[str] = field(default_factory=list)
    mode: str = "mock"

    def __post_init__(self) -> None:
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        yield self

    def render(self, call: ChartCall) -> ChartResult:
        self.rendered.append(call.chart_template_id)
        if call.chart_template_id in self.down:
            return ChartFailure(self.error)
        return self.inner.render(call)


@dataclass
class BlinkingBucket:
    """The local bucket, whose next `png_blips` PNG writes and `manifest_blips` manifest writes
    fail as GCS's 503 does (transient)."""

    inner: LocalArtifactStore
    png_blips: int = 0
    manifest_blips: int = 0

    @property
    def bucket(self) -> str:
        return self.inner.bucket

    def check_bucket(self) -> None:
        self.inner.check_bucket()

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        if self.png_blips:
            self.png_blips -= 1
            raise ArtifactWriteError(f"writing gs://bkt/{object_path} failed: HTTP 503", transient=True)
        return self.inner.create_png(object_path, data, metadata=metadata)

    def list_objects(self, prefix: str, *, start_offset: str = "") -> Any:
        return self.inner.list_objects(prefix, start_offset=start_offset)

    def read_head(self, object_path: str, size: int) -> bytes:
        return self.inner.read_head(object_path, size)

    def put_manifest(self, object_path: str, data: bytes, **fence: Any) -> str:
        if self.manifest_blips:
            self.manifest_blips -= 1
            raise ArtifactWriteError("writing gs://bkt/manifest.json failed: HTTP 503", transient=True)
        return self.inner.put_manifest(object_path, data, **fence)


@dataclass
class World:
    runs: InMemoryFlowRuns
    bucket: BlinkingBucket
    charts: WindowedCharts
    clock: FakeClock

    def __post_init__(self) -> None:
        self.start = self.clock.now()

    def ports(self) -> Ports:
        templates = LocalTemplateSource(REPO / "chart-templates")
        return Ports(self.runs, templates, self.bucket, self.charts)

    def execute(self) -> StepReport:
        return execute_step("run1", "charts", ports=self.ports(), limits=LIMITS, clock=self.clock)

    def reap(self) -> Any:
        return reap_once(self.runs, clock=self.clock, max_attempts=STEP_ATTEMPTS)

    def step(self) -> dict[str, Any]:
        step: dict[str, Any] = self.runs.runs["run1"]["steps"]["charts"]
        return step

    def manifest(self) -> dict[str, Any]:
        uri = self.step()["outputs"]["outputsManifestGcsUri"]
        path = self.bucket.inner.local_path(uri.removeprefix("gs://bkt/"))
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return loaded


def at(world: World, minutes: float) -> str:
    """The moment `minutes` after the clock's start, as the step records moments."""
    return (world.start + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.fixture
def world(tmp_path: Path) -> World:
    step = chart_step_for(TEMPLATES, min_images=3)
    runs = InMemoryFlowRuns({"run1": flow_run({"charts": step})})
    return World(
        runs, BlinkingBucket(LocalArtifactStore(tmp_path / "gcs", "bkt")), WindowedCharts(), FakeClock()
    )


def test_a_window_longer_than_the_budget_makes_the_step_wait_then_it_succeeds_paying_nothing_twice(
    world: World, log_capture: LogCapture
) -> None:
    world.charts.down = set(TEMPLATES[1:])  # CHART-IMG unreachable for two of three charts
    first = world.execute()

    assert (first.outcome, first.error_code) == ("WAITING", "CHART_API_FAILED")
    assert first.retry_at == world.start + timedelta(minutes=1)  # the policy's first wait
    step = world.step()
    assert (step["status"], step["attempt"], step["retryAt"]) == ("RUNNING", 1, at(world, 1))
    assert step["leaseExpiresAt"] == step["retryAt"] and "error" not in step and "finishedAt" not in step
    assert world.runs.lease_of("run1", "charts")["expiresAt"] == step["retryAt"]  # the reaper's cue
    (wait,) = step["waits"]
    assert (wait["attempt"], wait["retryAt"], wait["error"]["code"]) == (
        1,
        step["retryAt"],
        "CHART_API_FAILED",
    )
    manifest = world.manifest()  # written for diagnosis: one chart, two failures
    assert (len(manifest["items"]), len(manifest["failures"])) == (1, 2)
    (line,) = log_capture.events("step waits: a bad window held it back")
    assert (line["retryAt"], line["severity"]) == (step["retryAt"], "WARNING")
    assert log_capture.events("step completed") == []

    world.clock.advance(59.0)
    assert world.reap().to_summary()["retried"] == []
    assert world.step()["status"] == "RUNNING"  # the wait is not over: nothing reaped
    world.charts.down = set()  # the window closes
    world.clock.advance(1.0)
    assert world.reap().to_summary()["retried"] == ["run1/charts"]
    assert world.step()["status"] == "READY" and "retryAt" not in world.step()

    second = world.execute()

    assert (second.outcome, second.items_count) == ("SUCCEEDED", 3)
    # the first chart reused, not paid again (each attempt renders its charts concurrently: in any order)
    first_attempt, retry = world.charts.rendered[:3], world.charts.rendered[3:]
    assert (sorted(first_attempt), sorted(retry)) == (sorted(TEMPLATES), sorted(TEMPLATES[1:]))
    step = world.step()
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 2)
    assert "retryAt" not in step and len(step["waits"]) == 1  # the history stays
    assert world.runs.lease_of("run1", "charts") is None
    reused = [i for i in world.manifest()["items"] if i.get("meta", {}).get("reused")]
    assert [i["chartTemplateId"] for i in reused] == [TEMPLATES[0]]


def test_a_window_longer_than_every_attempt_fails_naming_each_attempts_cause(world: World) -> None:
    world.charts.down = set(TEMPLATES)
    outcomes = []
    for _ in range(STEP_ATTEMPTS):
        report = world.execute()
        outcomes.append(report.outcome)
        if report.retry_at is not None:
            world.clock.advance((report.retry_at - world.clock.now()).total_seconds())
            world.reap()
    assert outcomes == ["WAITING", "WAITING", "FAILED"]
    step = world.step()
    assert (step["status"], step["attempt"], step["error"]["code"]) == ("FAILED", 3, "CHART_API_FAILED")
    assert step["error"]["message"].endswith("after 3 attempt(s), each held back by a bad moment")
    assert [a["attempt"] for a in step["error"]["details"]["attempts"]] == [1, 2, 3]
    # 1 and 2 minutes of waiting between the attempts
    assert [w["retryAt"] for w in step["waits"]] == [at(world, 1), at(world, 3)]


def test_what_the_request_caused_ends_the_step_at_once(world: World) -> None:
    world.charts.down, world.charts.error = set(TEMPLATES[1:]), REFUSED
    report = world.execute()
    assert (report.outcome, report.retry_at) == ("FAILED", None)
    step = world.step()
    assert step["status"] == "FAILED" and "waits" not in step and "retryAt" not in step


def test_a_store_blip_after_paying_is_waited_out_within_the_budget(
    world: World, log_capture: LogCapture
) -> None:
    """GCS answers 503 to the first four PNG writes (seconds of a blip): each write is tried
    again after 1 s doubling, and the step SUCCEEDS with every chart rendered once."""
    world.bucket.png_blips = 4
    report = world.execute()
    assert (report.outcome, report.items_count) == ("SUCCEEDED", 3)
    assert sorted(world.charts.rendered) == sorted(TEMPLATES)  # nothing paid twice
    retries = log_capture.events("artifact write retrying")
    assert len(retries) == 4 and all(line["waitSeconds"] >= 1.0 for line in retries)


def test_a_manifest_the_store_cannot_take_makes_the_step_wait_not_fail(world: World) -> None:
    """The bucket refuses the manifest through all its retries (a blip longer than them): the
    charts are paid for and stored, so the step waits; its next attempt reuses all of them."""
    world.bucket.manifest_blips = 5  # core.retry.ARTIFACT_WRITES' attempts
    first = world.execute()
    assert (first.outcome, first.error_code) == ("WAITING", "MANIFEST_WRITE_FAILED")
    assert "outputs" not in world.step()  # no manifest to name
    world.clock.advance(60.0)
    world.reap()
    second = world.execute()
    assert second.outcome == "SUCCEEDED"
    assert sorted(world.charts.rendered) == sorted(TEMPLATES)  # each once: the retry reused all three


def test_run_local_waits_for_its_step_and_runs_it_again_until_it_settles(world: World) -> None:
    """run-local's one call: the wait slept on its clock, the reaper's plan applied by
    `take_back`, the step executed again, all in one process."""
    world.charts.down = set(TEMPLATES[2:])
    taken_back: list[str] = []

    def take_back(run_id: str, step_id: str, now: Any) -> Any:
        taken_back.append(f"{run_id}/{step_id}")
        world.charts.down = set()
        return world.runs.take_back(run_id, step_id, now=now, max_attempts=STEP_ATTEMPTS)

    report = execute_chosen_step(
        choose_local_step(world.runs.runs["run1"], None),
        ports=world.ports(),
        limits=LIMITS,
        clock=world.clock,
        take_back=take_back,
    )
    assert report.outcome == "SUCCEEDED" and taken_back == ["run1/charts"]
    assert world.clock.sleeps[-1] == pytest.approx(60.0, abs=1.0)  # the step's wait, on the clock
    assert world.step()["attempt"] == 2
