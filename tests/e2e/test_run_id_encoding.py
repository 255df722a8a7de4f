"""Issue 25, item 7: a runId holding `%` (or any character a CloudEvents header encodes) is
decoded once, as the binding encodes it, and the step runs: here it fails VALIDATION_FAILED,
such an id being unsafe as a path, and never stays READY behind an event taken for poison.

The served worker (`worker-chart-export serve`, mock mode) on a Firestore emulator whose
update trigger points at it, and fake-gcs-server. Two deliveries of the same kind of run:
- a real protobuf event as production Eventarc sends it, its `subject` percent-encoded as the
  binding requires (`%` becomes `%25`), POSTed to the worker: the answer is the verdict;
- the emulator's own trigger, which sends the subject as it is (UTF-8 in the header).
"""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.stack import E2EStack, new_run_id, running_e2e_stack, wait_until
from harness.builders import chart_step, flow_run
from harness.gcs_emulator import GcsEmulator
from worker_chart_export.testing import binary_update_event

pytestmark = pytest.mark.emulators


@pytest.fixture(scope="module")
def e2e(gcs_emulator: GcsEmulator) -> Iterator[E2EStack]:
    with running_e2e_stack(gcs_emulator) as stack:
        yield stack


def binding_encoded(text: str) -> str:
    """As the CloudEvents HTTP binding (v1.0.2, 3.1.3.2) writes a header value: `%`, space,
    `"` and every byte outside printable ASCII percent-encoded, the rest as it is."""
    return "".join(
        chr(b) if 0x21 <= b <= 0x7E and chr(b) not in '%"' else f"%{b:02X}" for b in text.encode("utf-8")
    )


def step_of(stack: E2EStack, run_id: str) -> dict[str, Any]:
    step: dict[str, Any] = stack.flow_run(run_id)["steps"]["charts"]
    return step


def post(stack: E2EStack, body: bytes, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", stack.worker.port)
    try:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def assert_refused_as_a_path(stack: E2EStack, run_id: str) -> None:
    step = step_of(stack, run_id)
    assert step["status"] == "FAILED", step
    assert step["error"]["code"] == "VALIDATION_FAILED" and "runId" in step["error"]["message"]
    assert stack.objects("charts/") == [] or not any(run_id in name for name in stack.objects("charts/"))


@pytest.mark.parametrize("shape", ["pct%41", "pct%25", "pct%2F", "pct 1"])
def test_a_run_id_encoded_by_the_cloudevents_binding_is_decoded_once_and_runs(
    e2e: E2EStack, shape: str
) -> None:
    run_id = new_run_id(shape)
    document = flow_run({"charts": chart_step()}, run_id=run_id)
    e2e.flow_run_ref(run_id).set(document)  # a creation: the update trigger stays silent
    body, headers = binary_update_event("demo-worker-chart-export", run_id, document, uuid.uuid4().hex)
    headers["ce-subject"] = binding_encoded(f"documents/flow_runs/{run_id}")
    headers["ce-document"] = binding_encoded(f"flow_runs/{run_id}")

    assert post(e2e, body, headers) == 200

    assert_refused_as_a_path(e2e, run_id)
    (handled,) = e2e.worker.lines_for(run_id, "event handled")
    assert handled["errorCode"] == "VALIDATION_FAILED"
    assert not [
        line for line in e2e.worker.log_lines() if line.get("message", "").startswith("event ignored")
    ]


@pytest.mark.parametrize("shape", ["pct%41", "pct%41é"])
def test_a_run_id_the_emulator_sends_unencoded_runs(e2e: E2EStack, shape: str) -> None:
    run_id = new_run_id(shape)
    e2e.flow_run_ref(run_id).set(flow_run({"charts": chart_step(status="PENDING")}, run_id=run_id))
    e2e.flow_run_ref(run_id).update({"steps.`charts`.status": "READY"})  # the trigger's update

    def settled() -> bool:
        ignored = [
            line
            for line in e2e.worker.log_lines()
            if line.get("message", "").startswith("event ignored")
            and "pct%41" in str(line.get("eventSubject"))
        ]
        return bool(ignored or e2e.worker.lines_for(run_id, "event handled"))

    wait_until(settled, what=f"the worker's verdict on {run_id!r}:\n{e2e.worker.log_tail()}")
    assert_refused_as_a_path(e2e, run_id)
