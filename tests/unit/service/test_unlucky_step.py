"""Issue 25, items 4 and 5, on the in-memory flow_runs (claim, lease, reaper) and the local
bucket: a store blip at the manifest's fence never ends a paid step (the reaper gives it back,
the retry reuses what was paid for), nor at the template read (before the claim: nothing
claimed; after it: the templates read before it, else left to its lease), and a bucket that
cannot store anything is found before the claim, so nothing is claimed or paid for."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, chart_step, flow_run
from harness.logs import LogCapture
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import LocalArtifactStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import (
    BucketUnusable,
    RedeliverEvent,
    StorageUnavailable,
    TransientStoreError,
)
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.step.step_rules import RunVersion
from worker_chart_export.core.templates.template_check import StoredTemplate
from worker_chart_export.core.types import ChartCall, ChartResult
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.reaper import reap_once
from worker_chart_export.testing import FakeClock
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

# REQUEST_TIMEOUT_SECONDS <= 30: the lease is never "surely held", so the fence reads the store
LIMITS = StepLimits.within_request(request_timeout_seconds=30.0, finalize_budget_seconds=5)


class CountingChartApi:
    """The mock CHART-IMG, counting the charts rendered."""

    mode = "mock"

    def __init__(self) -> None:
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))
        self.rendered: list[str] = []
        self.bodies: dict[str, Mapping[str, Any]] = {}  # the body each template's chart was asked with

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        yield self

    def render(self, call: ChartCall) -> ChartResult:
        self.rendered.append(call.chart_template_id)
        self.bodies[call.chart_template_id] = call.body
        return self.inner.render(call)


@dataclass
class BlippingRuns:
    """The in-memory flow_runs whose fence read fails `blips` times (a Firestore pause)."""

    inner: InMemoryFlowRuns
    blips: int = 0
    superseded: bool = False  # the fence's answer: the claim was taken back
    finalizes: list[str] = field(default_factory=list)

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        if self.blips:
            self.blips -= 1
            raise TransientStoreError(
                "check of the claim on step charts in flow_runs/run1: Firestore unavailable"
            )
        return not self.superseded and self.inner.claim_is_current(*args)

    def finalize_step(self, *args: Any, final: Any, **kwargs: Any) -> Any:
        self.finalizes.append(final.status.value)
        return self.inner.finalize_step(*args, final=final, **kwargs)


@dataclass
class CheckedBucket:
    """The local bucket, counting its checks (or failing them: the bucket is gone)."""

    inner: LocalArtifactStore
    gone: bool = False
    vanishes_after_check: bool = False  # deleted between the check and the writes
    checks: int = 0

    @property
    def bucket(self) -> str:
        return self.inner.bucket

    def check_bucket(self) -> None:
        self.checks += 1
        if self.gone:
            raise BucketUnusable(
                f"listing gs://{self.bucket}/ failed after 1 attempt: (bucket 'bkt' not found)"
            )
        self.inner.check_bucket()

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        assert not self.gone, "nothing may be written to a bucket found missing"
        if self.vanishes_after_check:
            raise BucketUnusable(
                f"writing gs://bkt/{object_path} failed after 1 attempt: (bucket 'bkt' not found)"
            )
        return self.inner.create_png(object_path, data, metadata=metadata)

    def list_objects(self, prefix: str, *, start_offset: str = "") -> Any:
        return self.inner.list_objects(prefix, start_offset=start_offset)

    def read_head(self, object_path: str, size: int) -> bytes:
        return self.inner.read_head(object_path, size)

    def put_manifest(self, object_path: str, data: bytes, **fence: Any) -> str:
        return self.inner.put_manifest(object_path, data, **fence)


@dataclass
class BlippingTemplates:
    """The local templates, whose next `blips` reads fail (a Firestore pause); reads recorded."""

    inner: LocalTemplateSource = field(default_factory=lambda: LocalTemplateSource(REPO / "chart-templates"))
    blips: int = 0
    reads: list[list[str]] = field(default_factory=list)

    def get_templates(self, template_ids: Sequence[str]) -> Mapping[str, StoredTemplate]:
        self.reads.append(list(template_ids))
        if self.blips:
            self.blips -= 1
            raise TransientStoreError("read of chart_templates: Firestore unavailable (503)")
        return self.inner.get_templates(template_ids)


@dataclass
class Step:
    runs: BlippingRuns
    bucket: CheckedBucket
    charts: CountingChartApi
    clock: FakeClock
    tmp: Path
    templates: BlippingTemplates = field(default_factory=BlippingTemplates)

    def execute(self, seen: RunVersion | None = None) -> Any:
        """`seen`: the version of the run an event carried (None: run-local, or an event
        not decodable whole)."""
        ports = Ports(self.runs, self.templates, self.bucket, self.charts)
        return execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=self.clock, seen=seen)

    def event_version(self) -> RunVersion:
        """The run as an event carries it now."""
        return RunVersion(copy.deepcopy(self.runs.inner.runs["run1"]), self.clock.now())

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.runs.inner.runs["run1"]["steps"]["charts"]
        return state

    def objects(self) -> list[str]:
        return [o.name for o in self.bucket.inner.list_objects("charts/")]


@pytest.fixture
def step(tmp_path: Path) -> Step:
    runs = InMemoryFlowRuns({"run1": flow_run({"charts": chart_step()})})
    bucket = CheckedBucket(LocalArtifactStore(tmp_path / "gcs", "bkt"))
    return Step(BlippingRuns(runs), bucket, CountingChartApi(), FakeClock(), tmp_path)


# --- item 5: a transient store error at the fence ------------------------------------------


def test_a_blip_at_the_manifest_fence_asks_for_redelivery_and_records_nothing(
    step: Step, log_capture: LogCapture
) -> None:
    step.runs.blips = 1

    with pytest.raises(RedeliverEvent, match="left to its lease") as redelivery:
        step.execute()

    assert "3 charts stored for the retry to reuse" in str(redelivery.value)
    assert step.runs.finalizes == []  # neither FAILED nor anything else: nothing is decided
    state = step.state()
    assert state["status"] == "RUNNING" and "error" not in state and state["leaseExpiresAt"]
    assert step.runs.inner.lease_of("run1", "charts") is not None  # for the reaper
    assert len([o for o in step.objects() if o.endswith(".png")]) == 3
    assert not [o for o in step.objects() if o.endswith("manifest.json")]  # never unfenced
    assert log_capture.events("step crashed") == [] and log_capture.events("manifest write failed") == []


def test_the_reaper_gives_the_step_back_and_the_retry_finishes_it_from_the_paid_pngs(step: Step) -> None:
    step.runs.blips = 1
    with pytest.raises(RedeliverEvent):
        step.execute()
    assert step.charts.rendered and len(step.charts.rendered) == 3
    rendered_before = list(step.charts.rendered)

    step.clock.advance(LIMITS.lease_seconds + 1)  # the lease runs out; the scheduler's pass comes
    report = reap_once(step.runs.inner, clock=step.clock)
    assert report.to_summary()["retried"] == ["run1/charts"] and step.state()["status"] == "READY"
    retry = step.execute()

    assert retry.outcome == "SUCCEEDED" and retry.items_count == 3
    assert step.charts.rendered == rendered_before  # 0 more charts paid for
    assert step.state()["attempt"] == 2 and step.runs.finalizes == ["SUCCEEDED"]
    manifest = json.loads(
        (step.tmp / "gcs" / "bkt" / "charts" / "run1" / "charts" / "manifest.json").read_text()
    )
    assert all(item["meta"]["reused"] is True for item in manifest["items"])


def test_only_a_superseded_claim_ends_an_execution_at_the_fence(step: Step, log_capture: LogCapture) -> None:
    """The fence answering "no longer ours" is the one verdict that ends the execution."""
    step.runs.superseded = True
    report = step.execute()
    assert report.outcome == "FAILED" and report.error_code == "STEP_LEASE_EXPIRED"
    assert not [o for o in step.objects() if o.endswith("manifest.json")]
    # the charts it did render are still counted in what it reports
    assert (report.items_count, report.failures_count, report.min_images) == (3, 0, 2)
    [line] = log_capture.events("manifest not written: claim superseded")
    reason = "charts/run1/charts/manifest.json: the claim was taken back before the manifest was written"
    assert (line["severity"], line["reason"]) == ("WARNING", reason)


def test_a_crash_is_still_recorded_while_a_redelivery_is_not(step: Step, log_capture: LogCapture) -> None:
    """A defect still ends FAILED WORKER_INTERNAL_ERROR: only RedeliverEvents pass unrecorded."""

    def crash(call: ChartCall) -> ChartResult:
        raise RuntimeError("a defect")

    step.charts.render = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        step.execute()
    assert step.state()["status"] == "FAILED" and step.state()["error"]["code"] == "WORKER_INTERNAL_ERROR"


# --- item 5: a transient store error at the template read ----------------------------------


def test_a_template_read_blip_before_the_claim_claims_nothing_and_its_redelivery_runs_the_step(
    step: Step, log_capture: LogCapture
) -> None:
    step.templates.blips = 1
    event = step.event_version()

    with pytest.raises(RedeliverEvent, match="could not be read before its claim") as redelivery:
        step.execute(event)

    assert not isinstance(redelivery.value, StorageUnavailable)
    assert step.state() == chart_step()  # still READY, untouched: no claim, no attempt
    assert step.runs.inner.leases == {} and step.runs.finalizes == [] and step.charts.rendered == []
    assert log_capture.events("claim succeeded") == []

    report = step.execute(event)  # Eventarc's redelivery: the same event

    assert report.outcome == "SUCCEEDED" and step.state()["attempt"] == 1
    assert len(step.charts.rendered) == 3


def test_a_template_read_blip_after_the_claim_leaves_the_step_to_its_lease(
    step: Step, log_capture: LogCapture
) -> None:
    """Without the event's version (run-local, an event not decodable whole) the templates are
    read after the claim: a blip there is the fence's path, never a FAILED step."""
    step.templates.blips = 1

    with pytest.raises(
        RedeliverEvent, match="could not be read after its claim: step charts left to its lease"
    ):
        step.execute()

    assert step.runs.finalizes == [] and step.charts.rendered == []
    state = step.state()
    assert state["status"] == "RUNNING" and "error" not in state
    assert step.runs.inner.lease_of("run1", "charts") is not None  # for the reaper
    assert log_capture.events("step crashed") == []

    step.clock.advance(LIMITS.lease_seconds + 1)
    assert reap_once(step.runs.inner, clock=step.clock).to_summary()["retried"] == ["run1/charts"]
    retry = step.execute()
    assert retry.outcome == "SUCCEEDED" and step.state()["attempt"] == 2


def test_a_template_edited_between_the_read_before_the_claim_and_the_claim_is_drawn_as_edited(
    step: Step, tmp_path: Path
) -> None:
    """Seen in the chaos benchmark (seed 3, a loaded machine): the edit committed 13 ms after
    the read before the claim and before the claim; the chart was drawn from the older version.
    The templates are read again after the claim."""
    folder = tmp_path / "templates"
    shutil.copytree(REPO / "chart-templates", folder)
    step.templates.inner = LocalTemplateSource(folder)
    edited = json.loads((folder / "momentum_rsi_macd_v1.json").read_text())
    edited["request"]["theme"] = "light"  # the bundled version draws "dark"
    claim = step.runs.claim_step

    def edit_then_claim(*args: Any, **kwargs: Any) -> Any:
        (folder / "momentum_rsi_macd_v1.json").write_text(json.dumps(edited))  # the user's edit
        return claim(*args, **kwargs)

    step.runs.claim_step = edit_then_claim  # type: ignore[method-assign]
    report = step.execute(step.event_version())

    assert report.outcome == "SUCCEEDED"
    asked = sorted(r["chartTemplateId"] for r in chart_step()["inputs"]["requests"])
    assert step.templates.reads == [asked, asked]  # before the claim, then after it
    assert step.charts.bodies["momentum_rsi_macd_v1"]["theme"] == "light"


def test_a_template_read_blip_after_the_claim_draws_those_read_before_it(
    step: Step, log_capture: LogCapture
) -> None:
    event = step.event_version()
    reads = step.templates.get_templates

    def blip_after_the_first(template_ids: Sequence[str]) -> Mapping[str, StoredTemplate]:
        step.templates.blips = len(step.templates.reads)  # 0 before the claim, 1 after it
        return reads(template_ids)

    step.templates.get_templates = blip_after_the_first  # type: ignore[method-assign]
    report = step.execute(event)

    assert report.outcome == "SUCCEEDED" and step.state()["attempt"] == 1
    assert len(step.templates.reads) == 2 and len(step.charts.rendered) == 3
    [line] = log_capture.events(
        "chart templates not read again after the claim: drawing those read before it"
    )
    assert line["severity"] == "WARNING"
    assert line["reason"] == "read of chart_templates: Firestore unavailable (503)"


def test_templates_the_claimed_version_asks_for_and_the_events_did_not_are_read_after_the_claim(
    step: Step,
) -> None:
    event = step.event_version()
    event.document["steps"]["charts"]["inputs"]["requests"].pop()  # an older version: one request fewer
    report = step.execute(event)
    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    claimed = sorted(r["chartTemplateId"] for r in chart_step()["inputs"]["requests"])
    assert len(step.templates.reads) == 2 and step.templates.reads[1] == claimed


# --- item 4: a bucket that cannot store anything --------------------------------------------


def test_a_bucket_found_missing_before_the_claim_claims_nothing_and_pays_nothing(
    step: Step, log_capture: LogCapture
) -> None:
    step.bucket.gone = True

    with pytest.raises(StorageUnavailable, match="bucket 'bkt' not found"):
        step.execute()

    assert step.bucket.checks == 1 and step.charts.rendered == []
    assert step.state() == chart_step()  # still READY, untouched: the redelivery claims it
    assert step.runs.inner.leases == {}
    assert log_capture.events("claim succeeded") == []


def test_once_the_bucket_is_back_the_redelivered_event_runs_the_step(step: Step) -> None:
    step.bucket.gone = True
    with pytest.raises(StorageUnavailable):
        step.execute()
    step.bucket.gone = False

    report = step.execute()

    assert report.outcome == "SUCCEEDED" and step.state()["attempt"] == 1
    assert step.bucket.checks == 2 and len(step.charts.rendered) == 3


def test_every_step_checks_its_bucket_once_before_its_claim(step: Step) -> None:
    step.execute()
    again = step.execute()  # a copy of the event: the step is no longer READY
    assert again.outcome == "NOOP" and step.bucket.checks == 2


def test_a_bucket_gone_between_its_check_and_the_writes_leaves_the_step_to_its_lease(
    step: Step, log_capture: LogCapture
) -> None:
    step.bucket.vanishes_after_check = True

    with pytest.raises(RedeliverEvent, match="the charts bucket is gone") as redelivery:
        step.execute()

    assert not isinstance(redelivery.value, StorageUnavailable)  # claimed: a 500, not a 503
    assert step.runs.finalizes == [] and step.state()["status"] == "RUNNING"  # never FAILED
    assert log_capture.events("step crashed") == []
