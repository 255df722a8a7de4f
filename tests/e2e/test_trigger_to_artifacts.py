"""End to end: flow_run writes in the Firestore emulator trigger the served worker, which
claims, renders (mock CHART-IMG), writes PNGs and the manifest to fake-gcs-server and
finalizes; its own claim and finalize writes come back as events and are no-ops."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib import request

import pytest
from google.cloud.firestore_v1.field_path import FieldPath

from e2e.stack import E2EStack, new_run_id, running_e2e_stack, wait_until
from harness.builders import SAMPLE_FLOW_RUN, chart_step, flow_run
from harness.gcs_emulator import GcsEmulator
from worker_chart_export.testing import binary_update_event

pytestmark = pytest.mark.emulators

CHART_STEP = "charts_1h"
CLAIM_SUCCEEDED = "claim succeeded"
NO_READY_STEP = "event received: no READY CHART_EXPORT step"


@pytest.fixture(scope="module")
def e2e_stack(gcs_emulator: GcsEmulator) -> Iterator[E2EStack]:
    with running_e2e_stack(gcs_emulator) as stack:
        yield stack


def sample_flow_run(run_id: str) -> dict[str, Any]:
    document = json.loads(SAMPLE_FLOW_RUN.read_text())
    document["runId"] = run_id
    return document


def create_then_advance(stack: E2EStack, run_id: str, document: dict[str, Any]) -> None:
    """The run as the flow writes it: created with its steps PENDING (the worker's trigger
    hears updates only, and advance_flow, not served here, would hear this), then one update
    giving each step its status in `document`, as advance_flow (READY) or the step's own
    worker would write it: the update the worker hears."""
    pending = copy.deepcopy(document)
    for step in pending["steps"].values():
        step["status"] = "PENDING"
    reference = stack.flow_run_ref(run_id)
    reference.create(pending)
    reference.update(
        {
            FieldPath("steps", step_id, "status").to_api_repr(): step["status"]
            for step_id, step in document["steps"].items()
        }
    )


def wait_for_statuses(stack: E2EStack, run_id: str, expected: dict[str, str]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        steps = stack.flow_run(run_id).get("steps", {})
        statuses = {step_id: steps.get(step_id, {}).get("status") for step_id in expected}
        return steps if statuses == expected else None

    return wait_until(
        reached,
        what=f"{run_id} steps {expected}; worker log:\n{stack.worker.log_tail()}",
    )


def pngs(stack: E2EStack, run_id: str, step_id: str) -> list[str]:
    return [name for name in stack.objects(f"charts/{run_id}/{step_id}/") if name.endswith(".png")]


def binary_event(run_id: str, document: dict[str, Any], event_id: str) -> tuple[bytes, dict[str, str]]:
    """The event exactly as production Eventarc delivers it: raw protobuf, binary mode."""
    return binary_update_event("demo-worker-chart-export", run_id, document, event_id)


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        with request.urlopen(request.Request(url, data=body, headers=headers)) as reply:
            return int(reply.status)
    except request.HTTPError as error:
        return int(error.code)


def test_an_update_runs_the_step_once_and_our_own_writes_are_noops(e2e_stack: E2EStack) -> None:
    run_id = new_run_id("sample")
    create_then_advance(e2e_stack, run_id, sample_flow_run(run_id))

    steps = wait_for_statuses(e2e_stack, run_id, {CHART_STEP: "SUCCEEDED"})
    manifest_path = f"charts/{run_id}/{CHART_STEP}/manifest.json"
    step = steps[CHART_STEP]
    assert step["outputs"]["outputsManifestGcsUri"] == f"gs://{e2e_stack.bucket}/{manifest_path}"
    assert "error" not in step or not step["error"]
    # the other steps are not ours
    assert steps["ohlcv_export_1h"]["status"] == "SUCCEEDED"
    assert steps["llm_report"]["status"] == "PENDING"

    manifest = json.loads(e2e_stack.read_object(manifest_path))
    assert (manifest["runId"], manifest["stepId"]) == (run_id, CHART_STEP)
    assert len(manifest["items"]) == 3 and manifest["failures"] == []
    stored = pngs(e2e_stack, run_id, CHART_STEP)
    assert sorted(item["png_gcs_uri"] for item in manifest["items"]) == [
        f"gs://{e2e_stack.bucket}/{name}" for name in stored
    ]
    assert all(e2e_stack.read_object(name).startswith(b"\x89PNG\r\n\x1a\n") for name in stored)
    templates = sorted(request["chartTemplateId"] for request in step["inputs"]["requests"])
    assert sorted(name.rsplit("_1h_", 1)[1].removesuffix(".png") for name in stored) == templates
    assert all("_BINANCE-BTCUSDT_1h_" in name for name in stored)

    # the claim and the finalize are updates too: both come back and are no-ops
    worker = e2e_stack.worker
    wait_until(
        lambda: len(worker.lines_for(run_id, NO_READY_STEP)) >= 2,
        what=f"two no-op events for {run_id}; log:\n{worker.log_tail()}",
    )
    assert len(worker.lines_for(run_id, CLAIM_SUCCEEDED)) == 1
    handled = worker.lines_for(run_id, "event handled")
    assert [(line["stepId"], line["outcome"]) for line in handled] == [(CHART_STEP, "SUCCEEDED")]
    received = [
        line
        for line in worker.log_lines()
        if line.get("message", "").startswith("event received")
        and line.get("eventSubject") == f"documents/flow_runs/{run_id}"
    ]
    assert len(received) == 3  # the update, the claim, the finalize: the creation is not heard


def test_the_same_event_three_times_at_once_runs_the_step_once(e2e_stack: E2EStack) -> None:
    run_id = new_run_id("dup")
    document = flow_run({"charts_1h": chart_step()}, run_id=run_id)
    e2e_stack.flow_run_ref(run_id).set(document)  # a create: the update trigger stays quiet
    body, headers = binary_event(run_id, document, event_id=f"evt-{run_id}")

    with ThreadPoolExecutor(max_workers=3) as pool:
        statuses = list(pool.map(lambda _: post(e2e_stack.trigger_url, body, headers), range(3)))

    # a loser that gave up on contention while the step was still READY asks for redelivery
    assert set(statuses) <= {200, 500} and 200 in statuses, statuses
    wait_for_statuses(e2e_stack, run_id, {"charts_1h": "SUCCEEDED"})
    worker = e2e_stack.worker
    assert len(worker.lines_for(run_id, CLAIM_SUCCEEDED)) == 1
    assert len(pngs(e2e_stack, run_id, "charts_1h")) == 3  # one set: one per template


@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED", "FAILED"])
def test_a_step_that_is_not_ready_is_never_touched(e2e_stack: E2EStack, status: str) -> None:
    run_id = new_run_id(status.lower())
    finished = {"finishedAt": "2026-11-22T04:03:00.000Z"} if status != "RUNNING" else {}
    document = flow_run(
        {"charts_1h": chart_step(status=status, attempt=1, claimToken="someone-else", **finished)},
        run_id=run_id,
    )
    create_then_advance(e2e_stack, run_id, document)
    worker = e2e_stack.worker
    wait_until(
        lambda: worker.lines_for(run_id, NO_READY_STEP),
        what=f"the no-op event for {run_id}; log:\n{worker.log_tail()}",
    )

    assert e2e_stack.flow_run(run_id) == document
    assert e2e_stack.objects(f"charts/{run_id}/") == []
    assert worker.lines_for(run_id, CLAIM_SUCCEEDED) == []


def test_two_ready_steps_both_succeed_one_per_invocation(e2e_stack: E2EStack) -> None:
    run_id = new_run_id("two")
    document = flow_run({"charts_b": chart_step(), "charts_a": chart_step()}, run_id=run_id)
    create_then_advance(e2e_stack, run_id, document)

    wait_for_statuses(e2e_stack, run_id, {"charts_a": "SUCCEEDED", "charts_b": "SUCCEEDED"})
    worker = e2e_stack.worker
    claims = worker.lines_for(run_id, CLAIM_SUCCEEDED)
    assert sorted(line["stepId"] for line in claims) == ["charts_a", "charts_b"]
    assert len({line["eventId"] for line in claims}) == 2, "both steps ran in one invocation"
    # the smallest id goes first: its claim is what wakes the worker for the second
    assert [line["stepId"] for line in claims] == ["charts_a", "charts_b"]
    assert len(pngs(e2e_stack, run_id, "charts_a")) == 3
    assert len(pngs(e2e_stack, run_id, "charts_b")) == 3
