"""A run starts by itself: `worker-chart-export submit` (the console script, in its own
process) creates a flow_run whose steps are all PENDING in the stack's emulator and follows
it; advance_flow hears the creation and everything else follows from our functions' writes.

"No other write" is checked on the versions advance_flow's trigger carried: it hears every
write of the document, so the list of versions is the list of writes, each one of them
attributable to a function by what it changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib import request

import pytest

from e2e.flow_stack import (
    ADVANCE_TRIGGER,
    WORKER_TRIGGER,
    DeliveredEvent,
    as_delivered,
    log_tails,
    new_run_id,
    running_stack,
    settled,
    subject,
    versions,
    wait_until,
)
from harness.builders import SAMPLE_FLOW_RUN, chart_step, flow_run
from worker_chart_export.functions.decoding.versions import decode_document_version
from worker_chart_export.tools.devstack.stack import ADVANCE_TARGET, LocalStack

pytestmark = pytest.mark.emulators


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("created-stack")) as running:
        yield running


def submit(stack: LocalStack, *flags: str) -> subprocess.CompletedProcess[str]:
    script = shutil.which("worker-chart-export", path=str(Path(sys.executable).parent))
    assert script is not None, "console script worker-chart-export not installed next to the interpreter"
    env = {
        **os.environ,
        "FIRESTORE_EMULATOR_HOST": stack.emulator_host,
        "GOOGLE_CLOUD_PROJECT": stack.project,
    }
    return subprocess.run(
        [script, "submit", *flags],
        capture_output=True,
        text=True,
        env=env,
    )


def statuses(document: dict[str, Any]) -> tuple[str, ...]:
    steps = document["steps"]
    return (document["status"], *(steps[step_id]["status"] for step_id in sorted(steps)))


def test_a_created_run_reaches_succeeded_with_only_our_functions_writing(
    stack: LocalStack, tmp_path: Path
) -> None:
    run_id = new_run_id("created")
    document = flow_run(
        {
            "charts_a": chart_step(status="PENDING"),
            "charts_b": chart_step(status="PENDING", dependsOn=["charts_a"]),
        },
        run_id=run_id,
    )
    document["status"] = "PENDING"
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(document), encoding="utf-8")

    # --wait's own limit (600 s) outlasts pytest-timeout's 300 s: the run's end decides, not a clock
    done = submit(stack, "--flow-run-path", str(path), "--wait")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{log_tails(stack)}"
    lines = done.stdout.splitlines()
    assert lines[0] == run_id and f"run {run_id}: SUCCEEDED" in lines
    for step_id in ("charts_a", "charts_b"):
        uri = f"gs://{stack.bucket}/charts/{run_id}/{step_id}/manifest.json"
        assert f"{step_id}: {uri}" in lines
        # the hint names the program as it can be typed here (the script started, not on PATH)
        [program] = [line.split()[1] for line in lines if line.endswith(f" view {uri}")]
        assert lines.count(f"  view: {program} view {uri}") == 1
        assert (
            Path(program).resolve() == Path(sys.executable).parent.joinpath("worker-chart-export").resolve()
        )
    assert done.stderr == ""  # the file already said PENDING: no note

    # advance_flow hears every write: its events are the document's history, write by write
    expected_writes = [
        ("PENDING", "PENDING", "PENDING"),  # submit: the creation
        ("RUNNING", "READY", "PENDING"),  # advance_flow, on the creation event
        ("RUNNING", "RUNNING", "PENDING"),  # the worker's claim
        ("RUNNING", "SUCCEEDED", "PENDING"),  # its finalize
        ("RUNNING", "SUCCEEDED", "READY"),  # advance_flow
        ("RUNNING", "SUCCEEDED", "RUNNING"),  # the worker's claim
        ("RUNNING", "SUCCEEDED", "SUCCEEDED"),  # its finalize
        ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED"),  # advance_flow
    ]
    wait_until(lambda: settled(stack, run_id), what=f"{run_id} settled")
    assert [statuses(version) for _, version in versions(stack, run_id)] == expected_writes
    # one event per write and no more: 8 writes to advance_flow, the 7 updates to the worker
    assert stack.router.counts(subject(run_id)) == {ADVANCE_TRIGGER: 8, WORKER_TRIGGER: 7}
    assert {d.status for d in stack.router.deliveries if d.subject == subject(run_id)} == {200}
    events = [DeliveredEvent(d) for d in stack.router.delivered(ADVANCE_TRIGGER, subject(run_id))]
    assert {event.get("type") for event in events} == {"google.cloud.firestore.document.v1.written"}
    assert [decode_document_version(event).created for event in events].count(True) == 1


def test_duplicate_and_reordered_creation_and_update_events_write_nothing(stack: LocalStack) -> None:
    run_id = new_run_id("replayed")
    document = flow_run({"charts": chart_step(status="PENDING")}, run_id=run_id)
    stack.write_flow_run(document)
    wait_until(
        lambda: (stack.flow_run_ref(run_id).get().to_dict() or {}).get("status") == "SUCCEEDED",
        what=f"{run_id} SUCCEEDED; logs:\n{log_tails(stack)}",
    )
    wait_until(lambda: settled(stack, run_id), what=f"{run_id} settled")
    # the creation, READY, claim, finalize and SUCCEEDED events
    assert stack.router.counts(subject(run_id))[ADVANCE_TRIGGER] == 5
    before = stack.flow_run_ref(run_id).get()

    # every event advance_flow received, again, newest first: the creation last
    url = stack.functions[ADVANCE_TARGET].url + "/"
    for delivery in reversed(stack.router.delivered(ADVANCE_TRIGGER, subject(run_id))):
        body, headers = as_delivered(delivery)
        with request.urlopen(request.Request(url, data=body, headers=headers)) as reply:
            assert reply.status == 200

    # each answered after any write it made: none made one, so no event can follow
    after = stack.flow_run_ref(run_id).get()
    assert after.update_time == before.update_time and after.to_dict() == before.to_dict()
    assert stack.router.counts(subject(run_id))[ADVANCE_TRIGGER] == 5


def test_submit_creates_the_bundled_sample_under_a_new_id_once(stack: LocalStack) -> None:
    run_id = new_run_id("sample")
    first = submit(stack, "--flow-run-path", str(SAMPLE_FLOW_RUN), "--run-id", run_id)

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [run_id]
    # the sample is a run caught mid-way (status RUNNING): created PENDING, and said so
    assert "says status RUNNING; created PENDING" in first.stderr
    created = versions(stack, run_id)
    assert created and created[0][1]["runId"] == run_id and created[0][1]["status"] == "PENDING"
    wait_until(
        lambda: (
            statuses(stack.flow_run_ref(run_id).get().to_dict() or {"status": "-", "steps": {}})[0]
            == "RUNNING"
        ),
        what=f"{run_id} RUNNING: advance_flow heard the creation",
    )

    again = submit(stack, "--flow-run-path", str(SAMPLE_FLOW_RUN), "--run-id", run_id)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.splitlines() == [
        f"worker-chart-export submit: error: flow_runs/{run_id} already exists: "
        "a run is created once; pick another --run-id"
    ]
