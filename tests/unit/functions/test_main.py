"""The served CloudEvent function: binary-mode events in, 2xx/5xx and log lines out."""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient
from google.protobuf import json_format

from harness.builders import REPO
from harness.logs import LogCapture, picked
from worker_chart_export.core.exceptions import FinalizeFailed, RedeliverEvent, StorageUnavailable
from worker_chart_export.functions.serve import create_function_app
from worker_chart_export.testing import build_document_event_data, document_resource_name

RUN_ID = "RUN1"
DOC_NAME = document_resource_name("demo-project", f"flow_runs/{RUN_ID}")
HEAVY_MODULES = (
    "google.cloud.firestore",
    "google.cloud.storage",
    "httpx",
    "pydantic",
    # what pulls them in: imported by the handler only when a step is to be executed
    "worker_chart_export.service.execute",
    "worker_chart_export.bootstrap",
    "worker_chart_export.bundled.chart_img_docs",  # CHART-IMG's documented lists: for steps only
    "worker_chart_export.core.templates.template_check",  # templates are checked for steps only
    "jsonschema",  # the template schema, compiled when a template is first checked
)


def flow_run_fields(steps: dict[str, Any]) -> dict[str, Any]:
    return {"runId": RUN_ID, "flowKey": "daily", "scope": {"symbol": "BTCUSDT"}, "steps": steps}


def chart_step(status: str = "READY") -> dict[str, Any]:
    return {"stepType": "CHART_EXPORT", "status": status, "timeframe": "1h"}


def protobuf_body(steps: dict[str, Any] | None, *, name: str = DOC_NAME) -> bytes:
    fields = None if steps is None else flow_run_fields(steps)
    old_fields = flow_run_fields({}) if steps is None else None
    return build_document_event_data(name, fields, old_fields).SerializeToString()


def binary_headers(
    *,
    event_id: str = "evt-1",
    path: str = f"flow_runs/{RUN_ID}",
    content_type: str = "application/protobuf",
) -> dict[str, str]:
    return {
        "ce-id": event_id,
        "ce-source": "//firestore.googleapis.com/projects/demo-project/databases/(default)",
        "ce-type": "google.cloud.firestore.document.v1.updated",
        "ce-specversion": "1.0",
        "ce-subject": f"documents/{path}",
        "ce-document": path,
        "ce-time": "2026-11-22T04:12:03.123Z",
        "content-type": content_type,
    }


def received(body: bytes, path: str = f"flow_runs/{RUN_ID}") -> dict[str, Any]:
    """Contract §10's "received event" fields of a line, for binary_headers()' event carrying `body`."""
    return {
        "eventType": "google.cloud.firestore.document.v1.updated",
        "eventSource": "//firestore.googleapis.com/projects/demo-project/databases/(default)",
        "eventSubject": f"documents/{path}",
        "eventTime": "2026-11-22T04:12:03.123Z",
        "payloadSize": len(body),
    }


@pytest.fixture(scope="module")
def client(served_main: None) -> FlaskClient:
    return create_function_app().test_client()


@dataclass
class FakeExecution:
    """Stands in for execute_step; records calls and plays a scripted outcome."""

    calls: list[tuple[str, str]]
    outcome: str = "SUCCEEDED"
    error_code: str | None = None
    raises: BaseException | None = None
    seen: list[Any] = field(default_factory=list)  # the version each claim is to be planned from

    def __call__(
        self, run_id: str, step_id: str, *, ports: Any, limits: Any, clock: Any, seen: Any = None
    ) -> Any:
        assert ports == "fake-ports" and limits == "fake-limits" and clock == "fake-clock"
        self.calls.append((run_id, step_id))
        self.seen.append(seen)
        if self.raises is not None:
            raise self.raises
        return SimpleNamespace(
            outcome=self.outcome,
            error_code=self.error_code,
            manifest_uri=f"gs://b/charts/{run_id}/{step_id}/manifest.json",
        )


@pytest.fixture
def fake_execution(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeExecution]:
    import worker_chart_export.bootstrap as bootstrap_module
    import worker_chart_export.service.execute as execute_module

    fake = FakeExecution(calls=[])
    step = SimpleNamespace(limits="fake-limits", ports="fake-ports", clock="fake-clock")
    monkeypatch.setattr(bootstrap_module, "runtime", lambda: SimpleNamespace(step=lambda: step))
    monkeypatch.setattr(execute_module, "execute_step", fake)
    yield fake


def only(lines: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(lines) == 1, lines
    return lines[0]


# --- no-op and poison events --------------------------------------------------------------


def test_no_ready_step_is_a_200_with_an_info_line(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    body = protobuf_body(
        {"charts_1h": chart_step("RUNNING"), "llm": {"stepType": "LLM_REPORT", "status": "READY"}}
    )
    response = client.post("/", data=body, headers=binary_headers(event_id="evt-noop"))
    assert response.status_code == 200
    # one line per no-op: the received event's attributes and the verdict together
    assert len(log_capture.lines()) == 1
    noop = only(log_capture.events("event received: no READY CHART_EXPORT step"))
    assert noop["eventId"] == "evt-noop"
    assert noop["eventType"] == "google.cloud.firestore.document.v1.updated"
    assert noop["eventSubject"] == f"documents/flow_runs/{RUN_ID}"
    assert (noop["severity"], noop["runId"], noop["code"]) == ("INFO", RUN_ID, "NO_READY_STEP")
    assert noop["service"] == "worker-chart-export"
    assert picked(noop, *received(body)) == received(body)
    assert noop["flowKey"] == "daily"
    assert fake_execution.calls == []


@pytest.mark.parametrize(
    ("body", "path", "reason"),
    [
        (b"\xff\xfe\x00 definitely not protobuf", f"flow_runs/{RUN_ID}", "neither a DocumentEventData"),
        (
            protobuf_body({"s": chart_step()}, name=document_resource_name("p", "users/U1")),
            "users/U1",
            "is not a flow_runs/{runId} document",
        ),
        (
            protobuf_body({"s": chart_step()}, name=document_resource_name("p", "flow_runs/R/sub/X")),
            "flow_runs/R/sub/X",
            "is not a flow_runs/{runId} document",
        ),
        (
            build_document_event_data(DOC_NAME, {"runId": RUN_ID}).SerializeToString(),
            f"flow_runs/{RUN_ID}",
            "no steps field",
        ),
    ],
    ids=["garbage", "wrong-collection", "nested-path", "no-steps"],
)
def test_poison_events_are_acknowledged_with_a_warning_naming_the_reason(
    client: FlaskClient,
    log_capture: LogCapture,
    fake_execution: FakeExecution,
    body: bytes,
    path: str,
    reason: str,
) -> None:
    response = client.post("/", data=body, headers=binary_headers(path=path))
    assert response.status_code == 200
    warning = only([line for line in log_capture.lines() if line["severity"] == "WARNING"])
    assert reason in warning["reason"]
    assert warning["code"] == "FLOW_RUN_INVALID"
    assert warning["message"] == "event ignored: not a decodable flow_run event"
    assert picked(warning, *received(body, path)) == received(body, path)  # the received event
    assert fake_execution.calls == []


def test_deleted_flow_run_is_a_noop(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    response = client.post("/", data=protobuf_body(None), headers=binary_headers())
    assert response.status_code == 200
    deleted = only(log_capture.events("event received: flow_run deleted, nothing to do"))
    assert deleted["code"] == "FLOW_RUN_NOT_FOUND"
    body = protobuf_body(None)
    assert (deleted["runId"], picked(deleted, *received(body))) == (RUN_ID, received(body))
    assert fake_execution.calls == []


# --- delegation -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["protobuf", "base64", "json"])
def test_the_smallest_ready_chart_export_step_is_executed(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution, shape: str
) -> None:
    fake_execution.outcome, fake_execution.error_code = "FAILED", "CHART_API_MOCK_MISSING"
    steps = {"charts_4h": chart_step(), "charts_1h": chart_step(), "a_done": chart_step("SUCCEEDED")}
    raw = protobuf_body(steps)
    if shape == "protobuf":
        body, content_type = raw, "application/protobuf"
    elif shape == "base64":  # the Firestore emulator's delivery
        body, content_type = base64.b64encode(raw), "application/protobuf"
    else:
        message = build_document_event_data(DOC_NAME, flow_run_fields(steps))
        body, content_type = json.dumps(json_format.MessageToDict(message)).encode(), "application/json"
    response = client.post("/", data=body, headers=binary_headers(content_type=content_type))
    assert response.status_code == 200
    assert fake_execution.calls == [(RUN_ID, "charts_1h")]
    parsed = only(log_capture.events("parsed event"))
    assert parsed["readyChartExportSteps"] == ["charts_1h", "charts_4h"]
    assert parsed["flowKey"] == "daily"
    formats = {"protobuf": "protobuf", "base64": "base64-protobuf", "json": "json"}
    assert parsed["payloadFormat"] == formats[shape]
    first = only(log_capture.events("event received"))
    # a JSON body reaches the function parsed: its size is not known there
    attributes = {**received(body), "payloadSize": None if shape == "json" else len(body)}
    assert picked(first, *attributes) == attributes and first["eventId"] == "evt-1"
    handled = only(log_capture.events("event handled"))
    assert (handled["outcome"], handled["stepId"]) == ("FAILED", "charts_1h")
    assert (handled["errorCode"], handled["runId"]) == ("CHART_API_MOCK_MISSING", RUN_ID)
    assert handled["outputsManifestGcsUri"] == f"gs://b/charts/{RUN_ID}/charts_1h/manifest.json"


def test_the_events_version_is_handed_to_the_claim(
    client: FlaskClient, fake_execution: FakeExecution
) -> None:
    updated = datetime(2026, 11, 22, 4, 12, 3, 123456, tzinfo=UTC)
    message = build_document_event_data(DOC_NAME, flow_run_fields({"s": chart_step()}))
    message.value.update_time.FromDatetime(updated)
    response = client.post("/", data=message.SerializeToString(), headers=binary_headers())
    assert response.status_code == 200
    [seen] = fake_execution.seen
    assert seen.update_time == updated and seen.document == flow_run_fields({"s": chart_step()})


def test_a_version_that_does_not_decode_whole_is_claimed_from_a_fresh_read(
    client: FlaskClient, fake_execution: FakeExecution, log_capture: LogCapture
) -> None:
    # The skim shows a READY step, but a field holds a timestamp Firestore never writes:
    # acknowledging would leave the step waiting, so the claim reads the document first.
    message = build_document_event_data(DOC_NAME, flow_run_fields({"s": chart_step()}))
    message.value.fields["createdAt"].timestamp_value.seconds = 10**13
    response = client.post("/", data=message.SerializeToString(), headers=binary_headers())
    assert response.status_code == 200
    assert fake_execution.calls == [(RUN_ID, "s")]
    assert fake_execution.seen == [None]
    warning = only(log_capture.events("event document not decodable whole: the claim reads it first"))
    assert warning["reason"].startswith("the document holds a timestamp Firestore never writes: ")


def test_a_version_without_an_update_time_is_claimed_from_a_fresh_read(
    client: FlaskClient, fake_execution: FakeExecution
) -> None:
    """Firestore always sends one; without it there is no version to plan the claim from."""
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 200
    assert fake_execution.seen == [None]


def test_an_unsafe_run_id_is_still_delegated(client: FlaskClient, fake_execution: FakeExecution) -> None:
    path = "flow_runs/run..1"
    body = protobuf_body({"s": chart_step()}, name=document_resource_name("p", path))
    response = client.post("/", data=body, headers=binary_headers(path=path))
    assert response.status_code == 200
    assert fake_execution.calls == [("run..1", "s")]


def test_claim_contention_fails_the_invocation_so_eventarc_redelivers(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    fake_execution.raises = RedeliverEvent("claim gave up after contention; step still READY")
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 500
    error = only([line for line in log_capture.lines() if line["severity"] == "ERROR"])
    assert error["message"] == "failing the invocation so Eventarc redelivers the event"
    assert error["reason"] == "claim gave up after contention; step still READY"
    assert (error["runId"], error["stepId"], error["errorType"]) == (RUN_ID, "s", "RedeliverEvent")
    assert "redelivery requested for step s" in response.text


def test_a_result_that_could_not_be_recorded_fails_the_invocation_and_says_so(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    fake_execution.raises = FinalizeFailed("step s could not be finalized within 30s: 503")
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 500
    error = only([line for line in log_capture.lines() if line["severity"] == "ERROR"])
    assert error["errorType"] == "FinalizeFailed" and "could not be finalized" in error["reason"]
    assert "still READY" not in error["message"]


def test_a_bucket_that_cannot_store_the_step_answers_503_with_one_error_line(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    fake_execution.raises = StorageUnavailable("step s not claimed: bucket 'bkt' not found")
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 503
    error = only([line for line in log_capture.lines() if line["severity"] == "ERROR"])
    assert error["errorType"] == "StorageUnavailable" and "bucket 'bkt' not found" in error["reason"]
    assert "Traceback" not in log_capture.text
    assert "redelivery requested for step s" in response.text


def test_an_unexpected_crash_is_logged_with_its_traceback_and_gives_500(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    fake_execution.raises = KeyError("boom")
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 500
    error = only(log_capture.events("event handling failed"))
    assert error["severity"] == "ERROR"
    assert "KeyError: 'boom'" in error["exception"]
    assert (error["runId"], error["stepId"]) == (RUN_ID, "s")  # logged where the step is known
    assert response.text == "500 Internal Server Error: event handling failed"  # the cause stays in the log


def test_log_lines_carry_service_and_env_from_a_fresh_request_thread(
    log_capture: LogCapture, fake_execution: FakeExecution
) -> None:
    """gunicorn's request threads do not inherit the context where logging was configured."""
    from cloudevents.http import CloudEvent

    from worker_chart_export.functions.main import on_flow_run_updated

    event = CloudEvent(
        {"type": "t", "source": "s", "subject": f"documents/flow_runs/{RUN_ID}"}, protobuf_body({})
    )
    worker = threading.Thread(target=on_flow_run_updated, args=(event,))
    worker.start()
    worker.join()  # the handler returns: pytest-timeout (pyproject) ends one that hangs
    lines = log_capture.lines()
    assert lines, "the handler logged nothing"
    assert all(line.get("service") == "worker-chart-export" and line.get("env") for line in lines)


# --- cost of the no-op path ---------------------------------------------------------------


def test_noop_event_imports_no_cloud_client_http_client_or_pydantic() -> None:
    script = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        from worker_chart_export.testing import build_document_event_data
        from worker_chart_export.functions.serve import create_function_app

        body = build_document_event_data(
            {DOC_NAME!r}, {{"runId": "RUN1", "steps": {{"c": {{"stepType": "CHART_EXPORT",
                                                           "status": "SUCCEEDED"}}}}}},
        ).SerializeToString()
        headers = {binary_headers()!r}
        response = create_function_app().test_client().post("/", data=body, headers=headers)
        heavy = {HEAVY_MODULES!r}
        print(json.dumps({{
            "status": response.status_code,
            "loaded": [name for name in heavy if name in sys.modules],
            # guards against a typo in the list: each name must be importable at all
            "importable": [importlib.util.find_spec(name) is not None for name in heavy],
        }}))
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    assert "no READY CHART_EXPORT step" in completed.stdout
    assert result["loaded"] == []
    assert all(result["importable"])


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_the_function_runs_imports_the_view_or_jinja2() -> None:
    # Every import statement, lazy ones included, of every module but the developers' entry
    # points (cli/, tools/) and testing.py: the served function never loads the view's page
    # machinery (Flask imports jinja2 itself; our code adds no template to a cold start).
    package = REPO / "src" / "worker_chart_export"
    outside = ("cli", "tools", "testing.py")
    served = [p for p in package.rglob("*.py") if p.relative_to(package).parts[0] not in outside]
    assert len(served) > 50 and package / "functions" / "main.py" in served
    offending = {
        f"{path.relative_to(package)}: {name}"
        for path in served
        for name in _imported_names(path)
        if name.split(".")[0] in ("jinja2", "markupsafe")
        or name.startswith(("worker_chart_export.tools", "worker_chart_export.cli"))
    }
    assert offending == set()


def test_a_decoder_defect_is_acknowledged_with_an_error_not_redelivered_forever(
    client: FlaskClient,
    log_capture: LogCapture,
    fake_execution: FakeExecution,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import worker_chart_export.functions.decoding.events as events_module

    def broken_decoder(_: Any) -> Any:
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(events_module, "decode_event", broken_decoder)
    response = client.post("/", data=protobuf_body({"s": chart_step()}), headers=binary_headers())
    assert response.status_code == 200
    error = only(log_capture.events("event ignored: the decoder failed"))
    assert error["severity"] == "ERROR"
    assert error["reason"] == "RuntimeError: decoder bug"
    assert "RuntimeError: decoder bug" in error["exception"]
    body = protobuf_body({"s": chart_step()})
    assert (error["code"], picked(error, *received(body))) == ("FLOW_RUN_INVALID", received(body))
    assert fake_execution.calls == []


# --- ids Firestore cannot hold, undecodable requests, traces ------------------------------


@pytest.mark.parametrize(
    "run_id", ["..", ".", "__x__", "r" * 2000], ids=["dotdot", "dot", "dunder", "2000-bytes"]
)
def test_a_run_id_firestore_cannot_hold_is_poison_not_a_500(
    client: FlaskClient, log_capture: LogCapture, fake_execution: FakeExecution, run_id: str
) -> None:
    path = f"flow_runs/{run_id}"
    body = protobuf_body({"s": chart_step()}, name=document_resource_name("p", path))
    response = client.post("/", data=body, headers=binary_headers(path=path))
    assert response.status_code == 200
    warning = only(log_capture.lines())
    assert (warning["severity"], warning["code"]) == ("WARNING", "FLOW_RUN_INVALID")
    assert warning["reason"].startswith("runId ")
    assert len(warning["reason"]) < 300  # a 2000-byte id is not copied into the line
    assert fake_execution.calls == []


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"[" * 100_000 + b"]" * 100_000, {"content-type": "application/cloudevents+json"}),
        (b"[" * 100_000 + b"]" * 100_000, binary_headers(content_type="application/json")),
        (b"\xff\xfe\xfa", {"content-type": "application/json"}),
        (b"[1]", {"content-type": "application/cloudevents+json"}),
    ],
    ids=["nested-structured", "nested-binary", "not-utf8-no-specversion", "json-array"],
)
def test_a_request_that_fails_before_the_function_is_a_400_with_one_warning(
    client: FlaskClient,
    log_capture: LogCapture,
    fake_execution: FakeExecution,
    body: bytes,
    headers: dict[str, str],
) -> None:
    response = client.post("/", data=body, headers=headers)
    assert response.status_code == 400
    assert b"not a decodable CloudEvent" in response.data
    warning = only(log_capture.lines())
    assert (warning["severity"], warning["message"]) == (
        "WARNING",
        "request rejected: not a decodable CloudEvent",
    )
    assert warning["httpStatus"] == 400 and warning["reason"]
    # the line says which request was refused: an operator finds its sender by it
    assert (warning["httpMethod"], warning["httpPath"], warning["contentType"]) == (
        "POST",
        "/",
        headers["content-type"],
    )
    assert "exception" not in warning and "Traceback" not in log_capture.text
    assert fake_execution.calls == []


def test_a_request_nothing_else_logged_still_leaves_one_line(
    client: FlaskClient, log_capture: LogCapture
) -> None:
    assert client.get("/").status_code == 405
    # functions-framework's own 400: neither a CloudEvent nor a convertible background event
    assert client.post("/", json={"hello": "world"}).status_code == 400
    method_not_allowed, not_an_event = log_capture.lines()
    assert (method_not_allowed["severity"], method_not_allowed["httpStatus"]) == ("WARNING", 405)
    assert (not_an_event["message"], not_an_event["httpStatus"]) == ("request rejected", 400)


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    "trace_header",
    [
        {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
        {"X-Cloud-Trace-Context": f"{TRACE_ID}/123;o=1"},
        {"ce-traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},  # the binary-mode extension
    ],
    ids=["traceparent", "x-cloud-trace-context", "ce-traceparent"],
)
def test_every_line_of_an_invocation_carries_its_trace(
    client: FlaskClient,
    log_capture: LogCapture,
    fake_execution: FakeExecution,
    monkeypatch: pytest.MonkeyPatch,
    trace_header: dict[str, str],
) -> None:
    from worker_chart_export import logs

    monkeypatch.setattr(logs, "_trace_project", "demo-project")
    headers = {**binary_headers(), **trace_header}
    assert client.post("/", data=protobuf_body({"s": chart_step()}), headers=headers).status_code == 200
    lines = log_capture.lines()
    assert [line["message"] for line in lines] == ["event received", "parsed event", "event handled"]
    assert {line["logging.googleapis.com/trace"] for line in lines} == {
        f"projects/demo-project/traces/{TRACE_ID}"
    }
    assert lines[-1]["logging.googleapis.com/labels"] == {"runId": RUN_ID, "stepId": "s"}


def test_a_structured_event_traceparent_extension_is_used_when_the_request_has_none(
    client: FlaskClient, log_capture: LogCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker_chart_export import logs

    monkeypatch.setattr(logs, "_trace_project", "demo-project")
    message = build_document_event_data(DOC_NAME, flow_run_fields({}))
    event = {
        "specversion": "1.0",
        "id": "evt-structured",
        "source": "//firestore.googleapis.com/projects/demo-project/databases/(default)",
        "type": "google.cloud.firestore.document.v1.updated",
        "subject": f"documents/flow_runs/{RUN_ID}",
        "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-00",
        "data": json_format.MessageToDict(message),
    }
    response = client.post(
        "/", data=json.dumps(event), headers={"content-type": "application/cloudevents+json"}
    )
    assert response.status_code == 200
    line = only(log_capture.lines())
    assert line["logging.googleapis.com/trace"] == f"projects/demo-project/traces/{TRACE_ID}"
    assert line["logging.googleapis.com/trace_sampled"] is False


# --- the entry decorator, as a new entry point would use it ---------------------------------


def test_cloud_event_entry_gives_a_new_entry_the_same_poison_crash_and_trace_handling(
    log_capture: LogCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudevents.http import CloudEvent
    from werkzeug.exceptions import InternalServerError

    from worker_chart_export import logs
    from worker_chart_export.core.exceptions import PoisonEvent
    from worker_chart_export.functions.envelope import cloud_event_entry

    monkeypatch.setattr(logs, "_trace_project", "demo-project")
    seen: list[str] = []

    @cloud_event_entry
    def advance(cloud_event: Any, log: Any) -> None:
        seen.append(cloud_event["id"])
        if cloud_event["id"] == "poison":
            raise PoisonEvent("not a flow_run")
        if cloud_event["id"] == "crash":
            raise KeyError("boom")
        log.info("advanced")

    def event(event_id: str) -> CloudEvent:
        attributes = {"id": event_id, "type": "t", "source": "s"}
        return CloudEvent({**attributes, "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}, b"")

    advance(event("fine"))  # called directly: no middleware, the entry opens the scope
    advance(event("poison"))
    with pytest.raises(InternalServerError):
        advance(event("crash"))
    fine, poison, crash = log_capture.lines()
    assert seen == ["fine", "poison", "crash"]
    assert (fine["message"], fine["eventId"]) == ("advanced", "fine")
    assert (poison["severity"], poison["reason"], poison["code"]) == (
        "WARNING",
        "not a flow_run",
        "FLOW_RUN_INVALID",
    )
    assert (crash["severity"], crash["reason"]) == ("ERROR", "KeyError: 'boom'")
    assert "KeyError: 'boom'" in crash["exception"]
    trace = f"projects/demo-project/traces/{TRACE_ID}"
    assert all(line["logging.googleapis.com/trace"] == trace for line in (fine, poison, crash))
    assert logs.current_request() is None  # the scope it opened is closed again
