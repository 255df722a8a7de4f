"""execute_step with the production adapters (Firestore + GCS emulators; charts from fixtures).

These are the issue's fault cases at the level a user meets them: what ends up on the step
and in the bucket.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from harness.builders import REPO, chart_step, flow_run, load_templates
from harness.gcs_emulator import list_objects, read_object, storage_client_for
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore, FirestoreTemplateSource
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.gcs import GcsArtifactStore
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import FinalizeFailed
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.step.step_rules import RunVersion
from worker_chart_export.core.types import ChartCall, ChartResult
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=3)


@pytest.fixture
def world(firestore_client: Any, gcs_bucket: tuple[Any, str]) -> Callable[..., Ports]:
    storage_client, bucket = gcs_bucket
    for template_id, template in load_templates().items():
        firestore_client.collection("chart_templates").document(template_id).set(template)

    def build(**overrides: Any) -> Ports:
        return Ports(
            flow_runs=overrides.get("flow_runs", FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)),
            templates=FirestoreTemplateSource(firestore_client, clock=SYSTEM_CLOCK),
            artifacts=overrides.get("artifacts", GcsArtifactStore(storage_client, bucket, clock=FakeClock())),
            chart_api=MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api")),
        )

    return build


def put_flow_run(client: Any, doc: dict[str, Any]) -> None:
    client.collection("flow_runs").document(doc["runId"]).set(doc)


def step_of(client: Any, run_id: str, step_id: str) -> dict[str, Any]:
    return client.collection("flow_runs").document(run_id).get().to_dict()["steps"][step_id]


def test_step_succeeds_with_pngs_and_manifest_in_gcs(
    world: Any, firestore_client: Any, gcs_bucket: Any
) -> None:
    storage_client, bucket = gcs_bucket
    put_flow_run(
        firestore_client,
        flow_run({"charts": chart_step(), "other": {"stepType": "LLM_REPORT", "status": "PENDING"}}),
    )
    report = execute_step("run1", "charts", ports=world(), limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    step = step_of(firestore_client, "run1", "charts")
    assert step["status"] == "SUCCEEDED" and step["attempt"] == 1
    assert step["outputs"]["outputsManifestGcsUri"] == f"gs://{bucket}/charts/run1/charts/manifest.json"
    data, content_type = read_object(storage_client, bucket, "charts/run1/charts/manifest.json")
    manifest = json.loads(data)
    assert content_type == "application/json" and len(manifest["items"]) == 3
    for item in manifest["items"]:
        png, png_type = read_object(
            storage_client, bucket, item["png_gcs_uri"].removeprefix(f"gs://{bucket}/")
        )
        assert png_type == "image/png" and png.startswith(b"\x89PNG")
    assert step_of(firestore_client, "run1", "other") == {"stepType": "LLM_REPORT", "status": "PENDING"}


# a write's retries made short: these tests are about what a write failing to the end leads to
SHORT_WRITES = Backoff(attempts=2, base=0.01, cap=0.02)


def test_gcs_failing_every_write_makes_the_step_wait_and_never_claims_success(
    world: Any, firestore_client: Any, gcs_bucket: Any, faulty_gcs_proxy: Any
) -> None:
    """The bucket refuses every write longer than the step's retries: the charts are paid for
    but cannot be stored, so the step waits for its next attempt (issue 37): no manifest, no
    outputs, nothing claimed."""
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(fail_first=1000, status=503)
    artifacts = GcsArtifactStore(storage_client_for(proxy.url), bucket, clock=FakeClock())
    limits = replace(LIMITS, artifact_writes=SHORT_WRITES)
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}))
    report = execute_step(
        "run1", "charts", ports=world(artifacts=artifacts), limits=limits, clock=SYSTEM_CLOCK
    )
    assert report.outcome == "WAITING" and report.error_code == "MANIFEST_WRITE_FAILED"
    step = step_of(firestore_client, "run1", "charts")
    assert step["status"] == "RUNNING" and step["retryAt"] == step["leaseExpiresAt"]
    assert step["waits"][0]["error"]["code"] == "MANIFEST_WRITE_FAILED"
    assert "outputs" not in step  # no manifest URI for a manifest that does not exist
    assert list_objects(gcs_bucket[0], bucket) == []


def test_gcs_failing_png_writes_records_gcs_write_failed_and_the_step_waits(
    world: Any, firestore_client: Any, gcs_bucket: Any, faulty_gcs_proxy: Any
) -> None:
    storage_client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(fail_first=6, status=503)  # 3 PNGs x 2 attempts, then the manifest passes
    artifacts = GcsArtifactStore(storage_client_for(proxy.url), bucket, clock=FakeClock())
    limits = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=30)
    limits = replace(limits, chart_concurrency=1, artifact_writes=SHORT_WRITES)
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}))
    report = execute_step(
        "run1", "charts", ports=world(artifacts=artifacts), limits=limits, clock=SYSTEM_CLOCK
    )
    assert report.outcome == "WAITING" and report.error_code == "GCS_WRITE_FAILED"
    manifest = json.loads(read_object(storage_client, bucket, "charts/run1/charts/manifest.json")[0])
    assert [f["error"]["code"] for f in manifest["failures"]] == ["GCS_WRITE_FAILED"] * 3
    assert step_of(firestore_client, "run1", "charts")["outputs"]["outputsManifestGcsUri"].endswith(
        "manifest.json"
    )


def test_a_six_second_gcs_blip_costs_seconds_not_the_step(
    world: Any, firestore_client: Any, gcs_bucket: Any, faulty_gcs_proxy: Any
) -> None:
    """Issue 37: uploads answered 503 for 6 s (listing fine) ended the step FAILED
    MANIFEST_WRITE_FAILED after about 4 s of retrying, with 270 s of budget left and the
    charts paid for. Each write now waits 1 s doubling (core.retry.ARTIFACT_WRITES) within the
    budget: the step SUCCEEDS. The 6 s are the FakeClock's, which the retries' sleeps move."""
    storage_client, bucket = gcs_bucket
    clock = FakeClock()
    blip_ends = clock.monotonic() + 6.0
    proxy = faulty_gcs_proxy(fail_first=0, status=503, failing=lambda: clock.monotonic() < blip_ends)
    artifacts = GcsArtifactStore(storage_client_for(proxy.url), bucket, clock=clock)
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}))
    ports = world(artifacts=artifacts, flow_runs=FirestoreFlowRunStore(firestore_client, clock=clock))
    report = execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=clock)
    assert (report.outcome, report.items_count) == ("SUCCEEDED", 3)
    assert proxy.failed_uploads >= 3 and clock.monotonic() >= blip_ends  # the blip was waited out
    manifest = json.loads(read_object(storage_client, bucket, "charts/run1/charts/manifest.json")[0])
    assert (len(manifest["items"]), manifest["failures"]) == (3, [])


class ClaimHereFinalizeThere:
    def __init__(self, claim_store: FirestoreFlowRunStore, finalize_store: FirestoreFlowRunStore) -> None:
        self.claim_store, self.finalize_store = claim_store, finalize_store

    def claim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.claim_store.claim_step(*args, **kwargs)

    def claim_is_current(self, *args: Any) -> bool:
        return self.claim_store.claim_is_current(*args)

    def finalize_step(self, *args: Any, **kwargs: Any) -> Any:
        return self.finalize_store.finalize_step(*args, **kwargs)


def test_firestore_unavailable_during_finalize_fails_the_invocation(
    world: Any, firestore_client: Any, unreachable_firestore_client: Any, log_capture: Any
) -> None:
    store = ClaimHereFinalizeThere(
        FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK),
        FirestoreFlowRunStore(unreachable_firestore_client, rpc_timeout=1.0, clock=SYSTEM_CLOCK),
    )
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}))
    with pytest.raises(FinalizeFailed, match="could not be finalized"):
        execute_step("run1", "charts", ports=world(flow_runs=store), limits=LIMITS, clock=SYSTEM_CLOCK)
    # The result could not be recorded: the step keeps its lease for recovery, and the loss is loud.
    step = step_of(firestore_client, "run1", "charts")
    assert step["status"] == "RUNNING" and step["leaseExpiresAt"]
    assert log_capture.events("finalize failed")[0]["severity"] == "ERROR"


ODD_STEP_ID = "charts 1h.v2-`x`/ü"


def test_step_id_full_of_odd_characters_is_failed_cleanly(
    world: Any, firestore_client: Any, gcs_bucket: Any
) -> None:
    put_flow_run(firestore_client, flow_run({ODD_STEP_ID: chart_step(), "charts": chart_step()}))
    report = execute_step("run1", ODD_STEP_ID, ports=world(), limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "VALIDATION_FAILED"
    step = step_of(firestore_client, "run1", ODD_STEP_ID)
    assert step["status"] == "FAILED" and "stepId" in step["error"]["message"]
    assert step_of(firestore_client, "run1", "charts")["status"] == "READY"  # sibling untouched
    assert list_objects(gcs_bucket[0], gcs_bucket[1]) == []


@pytest.mark.parametrize("run_id", ["run..escape", "..x", "run%2F..%2Fx"])
def test_run_id_that_would_escape_the_prefix_writes_nothing(
    world: Any, firestore_client: Any, gcs_bucket: Any, run_id: str
) -> None:
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}, run_id=run_id))
    report = execute_step(run_id, "charts", ports=world(), limits=LIMITS, clock=SYSTEM_CLOCK)
    assert report.outcome == "FAILED" and report.error_code == "VALIDATION_FAILED"
    assert step_of(firestore_client, run_id, "charts")["status"] == "FAILED"
    assert list_objects(gcs_bucket[0], gcs_bucket[1]) == []


def test_a_template_edited_in_firestore_just_before_the_claim_is_drawn_as_edited(
    world: Any, firestore_client: Any
) -> None:
    """The event's version shows the step, so its templates are read before the claim; the
    user's edit commits after that read and before the claim (what the chaos benchmark met on
    a loaded machine). The chart is asked with the edited request: read again after the claim."""
    put_flow_run(firestore_client, flow_run({"charts": chart_step()}))
    snapshot = firestore_client.collection("flow_runs").document("run1").get()
    seen = RunVersion(snapshot.to_dict(), snapshot.update_time)
    template = firestore_client.collection("chart_templates").document("momentum_rsi_macd_v1")
    runs = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    claim = runs.claim_step

    def edit_then_claim(*args: Any, **kwargs: Any) -> Any:
        template.update({"request.theme": "light"})  # the bundled version draws "dark"
        return claim(*args, **kwargs)

    runs.claim_step = edit_then_claim  # type: ignore[method-assign]
    ports = world(flow_runs=runs)
    asked: dict[str, Any] = {}
    render = ports.chart_api.render

    def recording(call: ChartCall) -> ChartResult:
        asked[call.chart_template_id] = call.body
        return render(call)

    ports.chart_api.render = recording  # type: ignore[method-assign]
    report = execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=SYSTEM_CLOCK, seen=seen)

    assert report.outcome == "SUCCEEDED"
    assert asked["momentum_rsi_macd_v1"]["theme"] == "light"
    assert asked["price_psar_adi_v1"]["theme"] == load_templates()["price_psar_adi_v1"]["request"]["theme"]
