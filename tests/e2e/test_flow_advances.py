"""End to end on the stack (emulator triggers -> router -> served advance_flow and worker):
a chain advances on its own without event loops, and duplicate or reordered events never
double-advance or regress anything. advance_flow hears every write (creations too), the
worker every update."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib import request

import pytest
from google.cloud.firestore_v1.field_path import FieldPath

from e2e.flow_stack import (
    ADVANCE_TRIGGER,
    WORKER_TRIGGER,
    as_delivered,
    history,
    log_tails,
    new_run_id,
    running_stack,
    settled,
    subject,
    wait_until,
)
from harness.builders import chart_step, flow_run
from worker_chart_export.testing import binary_update_event
from worker_chart_export.tools.devstack.stack import ADVANCE_TARGET, LocalStack

pytestmark = pytest.mark.emulators


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("flow-stack")) as running:
        yield running


def other_step(step_type: str, status: str, depends_on: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "stepType": step_type,
        "status": status,
        "dependsOn": depends_on,
        "inputs": {},
        "outputs": {},
        **extra,
    }


def field(step_id: str, name: str) -> str:
    return str(FieldPath("steps", step_id, name).to_api_repr())


def complete(stack: LocalStack, run_id: str, step_id: str) -> None:
    """What another worker would do: its step SUCCEEDED, in one write."""
    stack.flow_run_ref(run_id).update(
        {field(step_id, "status"): "SUCCEEDED", field(step_id, "finishedAt"): "2026-11-22T04:10:00.000Z"}
    )


def document(stack: LocalStack, run_id: str) -> dict[str, Any]:
    return stack.flow_run_ref(run_id).get().to_dict() or {}


def test_a_chain_advances_on_its_own_and_every_write_is_one_event(stack: LocalStack) -> None:
    run_id = new_run_id("chain")
    steps = {
        "ohlcv": other_step("OHLCV_EXPORT", "RUNNING", [], attempt=1),
        "charts": chart_step(status="PENDING", dependsOn=["ohlcv"]),
        "llm": other_step("LLM_REPORT", "PENDING", ["charts"]),
    }
    stack.flow_run_ref(run_id).set(flow_run(steps, run_id=run_id))  # advance_flow: nothing to do yet
    complete(stack, run_id, "ohlcv")  # the OHLCV worker's finalize: the first update

    wait_until(
        lambda: document(stack, run_id)["steps"]["llm"]["status"] == "READY",
        what=f"llm READY in {run_id}; logs:\n{log_tails(stack)}",
    )
    charts = document(stack, run_id)["steps"]["charts"]
    assert charts["status"] == "SUCCEEDED" and charts["attempt"] == 1
    manifest = f"charts/{run_id}/charts/manifest.json"
    assert charts["outputs"]["outputsManifestGcsUri"] == f"gs://{stack.bucket}/{manifest}"
    assert manifest in stack.objects(f"charts/{run_id}/")
    complete(stack, run_id, "llm")
    wait_until(lambda: document(stack, run_id)["status"] == "SUCCEEDED", what=f"{run_id} SUCCEEDED")

    # The bound. Every write of the document is one event to advance_flow, every update one
    # to the worker, and nothing else invokes these functions (the emulator does not
    # redeliver). The writes are: the test's creation (advance_flow's only) and 2 updates
    # (ohlcv done, llm done), the worker's 2 (claim, finalize) and advance_flow's 3 (charts
    # READY, llm READY, run SUCCEEDED). advance_flow's own writes come back as events that
    # plan to nothing and write nothing, so the chain stops: exactly 8 invocations of
    # advance_flow and 7 of the worker, however long we wait.
    wait_until(lambda: settled(stack, run_id), what=f"{run_id} settled")
    assert stack.router.counts(subject(run_id)) == {ADVANCE_TRIGGER: 8, WORKER_TRIGGER: 7}
    assert {d.status for d in stack.router.deliveries if d.subject == subject(run_id)} == {200}

    # the history the events carried, version by version
    assert history(stack, run_id, "charts") == ["PENDING", "READY", "RUNNING", "SUCCEEDED"]
    assert history(stack, run_id, "llm") == ["PENDING", "READY", "SUCCEEDED"]
    assert history(stack, run_id, None) == ["RUNNING", "SUCCEEDED"]


def event_for(
    run_id: str, version: dict[str, Any], update_time: datetime, event_id: str
) -> tuple[bytes, dict[str, str]]:
    """One version as production Eventarc delivers it: raw protobuf, binary mode."""
    return binary_update_event("demo-worker-chart-export", run_id, version, event_id, update_time=update_time)


def post(url: str, event: tuple[bytes, dict[str, str]]) -> int:
    body, headers = event
    with request.urlopen(request.Request(url, data=body, headers=headers)) as reply:
        return int(reply.status)


def test_duplicate_and_reordered_events_never_double_advance_or_regress(
    stack: LocalStack, tmp_path: Path
) -> None:
    run_id = new_run_id("dup")
    steps = {
        "a": other_step("OHLCV_EXPORT", "SUCCEEDED", [], attempt=1),
        "b": other_step("LLM_REPORT", "PENDING", ["a"]),
    }
    reference = stack.flow_run_ref(run_id)
    reference.set(flow_run(steps, run_id=run_id))  # its creation event reaches advance_flow too
    v0 = reference.get()
    advance_url = stack.functions[ADVANCE_TARGET].url + "/"

    # the same version three times at once, racing the trigger's own creation event: one
    # write wins, the others lose the precondition
    first = event_for(run_id, v0.to_dict(), v0.update_time, f"evt-{run_id}-0")
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(lambda _: post(advance_url, first), range(3))) == [200, 200, 200]
    wait_until(lambda: document(stack, run_id)["steps"]["b"]["status"] == "READY", what="b READY")
    v1 = reference.get()
    # exactly one write happened: the emulator sent one event per write (the creation and
    # that one), and no other came
    wait_until(lambda: stack.router.counts(subject(run_id))[ADVANCE_TRIGGER] == 2, what="2 events")

    complete(stack, run_id, "b")  # -> its event -> advance_flow: run SUCCEEDED
    wait_until(lambda: document(stack, run_id)["status"] == "SUCCEEDED", what=f"{run_id} SUCCEEDED")
    wait_until(lambda: settled(stack, run_id), what=f"{run_id} settled")
    assert stack.router.counts(subject(run_id))[ADVANCE_TRIGGER] == 4
    before = reference.get()

    # now the old versions arrive late, newest first, and once more each event the trigger
    # delivered, the creation included: none may write anything
    late = [
        event_for(run_id, v1.to_dict(), v1.update_time, f"evt-{run_id}-1"),
        event_for(run_id, v0.to_dict(), v0.update_time, f"evt-{run_id}-0"),
        first,
        *map(as_delivered, reversed(stack.router.delivered(ADVANCE_TRIGGER, subject(run_id)))),
    ]
    assert [post(advance_url, event) for event in late] == [200] * 7
    # each answered after any write it made: none made one, so no event can follow
    after = reference.get()
    assert after.update_time == before.update_time  # not even a same-value rewrite
    assert after.to_dict() == before.to_dict()
    assert (after.to_dict()["steps"]["b"]["status"], after.to_dict()["status"]) == ("SUCCEEDED", "SUCCEEDED")
    assert stack.router.counts(subject(run_id))[ADVANCE_TRIGGER] == 4
    assert history(stack, run_id, "b") == ["PENDING", "READY", "SUCCEEDED"]
    assert history(stack, run_id, None) == ["RUNNING", "SUCCEEDED"]
