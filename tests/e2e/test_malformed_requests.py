"""Malformed requests against the served worker, advance_flow and the reaper
(`worker-chart-export serve --target ...`, each its own process, pointed at the Firestore
emulator): each is answered 2xx or 4xx, leaves exactly one JSON line in the function's log,
and no line anywhere carries a traceback.

Each request carries its own W3C `traceparent`, so its lines are told apart by their
`logging.googleapis.com/trace`, which also checks that lines written before our function
ran (the cloudevents SDK failing on the body) belong to their request's trace.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.stack import Worker, start_worker, worker_command
from harness.firestore_emulator import FirestoreEmulator, free_port
from harness.gcs_emulator import GcsEmulator, storage_client_for
from worker_chart_export.testing import build_document_event_data, document_resource_name

pytestmark = pytest.mark.emulators

DEPTH = 100_000
NESTED_ARRAY = b"[" * DEPTH + b"]" * DEPTH
NESTED_OBJECT = b'{"a":' * DEPTH + b"1" + b"}" * DEPTH
NOT_UTF8 = b"\xff\xfe\xfa\x80 not utf-8 \xc3\x28"
PROJECT_ID = "demo-project"  # in the events' document names
READY_STEPS = {"charts_1h": {"stepType": "CHART_EXPORT", "status": "READY", "timeframe": "1h"}}


@dataclass
class Case:
    name: str
    body: bytes
    headers: dict[str, str]
    expected: tuple[int, ...]
    method: str = "POST"
    severity: str = "WARNING"
    path: str = "/"
    message_contains: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def binary_headers(
    path: str = "flow_runs/RUN1", content_type: str = "application/protobuf"
) -> dict[str, str]:
    return {
        "ce-id": f"evt-{uuid.uuid4().hex[:8]}",
        "ce-source": f"//firestore.googleapis.com/projects/{PROJECT_ID}/databases/(default)",
        "ce-type": "google.cloud.firestore.document.v1.updated",
        "ce-specversion": "1.0",
        "ce-subject": f"documents/{path}",
        "content-type": content_type,
    }


def ready_event(run_id: str, *, subject_path: str | None = None) -> tuple[bytes, dict[str, str]]:
    """An update event whose flow_run has a READY CHART_EXPORT step: without the id check
    it would be claimed in Firestore."""
    name = document_resource_name(PROJECT_ID, f"flow_runs/{run_id}")
    fields = {"runId": run_id, "flowKey": "daily", "steps": READY_STEPS}
    body = build_document_event_data(name, fields, fields).SerializeToString()
    return body, binary_headers(subject_path or f"flow_runs/{run_id}")


def structured(data: bytes) -> bytes:
    envelope = (
        b'{"specversion":"1.0","id":"e1","source":"s","type":"google.cloud.firestore.document.v1.updated",'
    )
    return envelope + b'"data":' + data + b"}"


def forged(name: str, run_id: str, subject_path: str | None = None) -> Case:
    body, headers = ready_event(run_id, subject_path=subject_path)
    return Case(name, body, headers, (200,), message_contains="event ignored")


CLOUDEVENTS_JSON = {"content-type": "application/cloudevents+json"}
CORPUS = [
    # nested JSON: the cloudevents SDK hits RecursionError before our function runs
    Case("nested-array-structured", NESTED_ARRAY, CLOUDEVENTS_JSON, (400,)),
    Case("nested-data-structured", structured(NESTED_ARRAY), CLOUDEVENTS_JSON, (400,)),
    Case("nested-array-binary", NESTED_ARRAY, binary_headers(content_type="application/json"), (400,)),
    Case("nested-object-binary", NESTED_OBJECT, binary_headers(content_type="application/json"), (400,)),
    # bad encodings
    Case("not-utf8-no-specversion", NOT_UTF8, {"content-type": "application/json"}, (400,)),
    Case("not-utf8-octets-no-specversion", NOT_UTF8, {"content-type": "application/octet-stream"}, (400,)),
    Case("not-utf8-structured", NOT_UTF8, CLOUDEVENTS_JSON, (400,)),
    Case("not-utf8-binary-json", NOT_UTF8, binary_headers(content_type="application/json"), (200,)),
    Case("not-utf8-binary-protobuf", NOT_UTF8, binary_headers(), (200,)),
    # wrong content types
    Case("text-plain-binary", b"hello", binary_headers(content_type="text/plain"), (200,)),
    Case("form-binary", b"a=b&c=d", binary_headers(content_type="application/x-www-form-urlencoded"), (200,)),
    Case("xml-no-specversion", b"<event/>", {"content-type": "application/xml"}, (400, 415)),
    Case("xml-as-structured", b"<event/>", CLOUDEVENTS_JSON, (400,)),
    Case("json-array-structured", b"[1, 2]", CLOUDEVENTS_JSON, (400,)),
    Case("json-batch", b"[1, 2]", {"content-type": "application/cloudevents-batch+json"}, (400,)),
    Case("json-not-an-event", b'{"hello": "world"}', {"content-type": "application/json"}, (400,)),
    # empty bodies
    Case("empty-no-headers", b"", {}, (400, 415)),
    Case("empty-binary", b"", binary_headers(), (200,)),
    Case("empty-structured", b"", CLOUDEVENTS_JSON, (400,)),
    # not a POST
    Case("get", b"", {}, (405,), method="GET"),
    # ids Firestore cannot hold, on events that would otherwise be executed
    forged("forged-dotdot", ".."),
    forged("forged-dot", "."),
    forged("forged-dunder", "__x__"),
    forged("forged-2000-bytes", "r" * 2000),
    forged("forged-encoded-slash", "a/b", subject_path="flow_runs/a%2Fb"),
]


@contextmanager
def serving(
    target: str,
    emulator: FirestoreEmulator,
    logs: pytest.TempPathFactory,
    warm_up: Case,
    storage: dict[str, str] | None = None,
) -> Iterator[Worker]:
    """`worker-chart-export serve --target <target>` in its own process, warmed by one
    well-formed request (so its start-up lines are written before the corpus is sent).
    `storage`: the worker's bucket variables (it checks its bucket before serving)."""
    script = worker_command(0)[0]
    server = start_worker(
        free_port(),
        {
            "FIRESTORE_EMULATOR_HOST": emulator.host,
            "GOOGLE_CLOUD_PROJECT": emulator.project,
            "CHARTS_API_MODE": "mock",
            "APP_ENV": "e2e",
            **(storage or {}),
        },
        logs.mktemp(target) / "function.log",
        command=[script, "serve", "--target", target],
    )
    try:
        if send(server, warm_up, uuid.uuid4().hex) not in warm_up.expected:
            pytest.fail(f"{target} did not answer the warm-up:\n{server.log_tail()}", pytrace=False)
        if target == "on_flow_run_updated":
            # the worker warms itself up in a background thread once serving (its line, "instance
            # warmed up", may come after that request)
            _wait_for_line(server, '"message": "instance warm')
        yield server
    finally:
        server.stop()


def _wait_for_line(server: Worker, text: str) -> None:
    """Until the served process writes `text` (pytest-timeout ends a wait for a line never
    written), or fails as soon as it exits without it."""
    while True:
        exited = server.process.poll() is not None  # before the read: a last line still counts
        if text in server.log_path.read_text(encoding="utf-8", errors="replace"):
            return
        if exited:
            pytest.fail(f"exited without a {text!r} line:\n{server.log_tail()}", pytrace=False)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served_worker(
    firestore_emulator: FirestoreEmulator, gcs_emulator: GcsEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    body = build_document_event_data(document_resource_name(PROJECT_ID, "flow_runs/RUN1"), {"steps": {}})
    warm_up = Case("warm-up", body.SerializeToString(), binary_headers(), (200,))  # a no-op event
    bucket = f"malformed-{uuid.uuid4().hex[:12]}"
    storage_client_for(gcs_emulator.url).create_bucket(bucket)
    storage = {"STORAGE_EMULATOR_HOST": gcs_emulator.url, "CHARTS_BUCKET": bucket}
    with serving("on_flow_run_updated", firestore_emulator, tmp_path_factory, warm_up, storage) as server:
        yield server


def send(worker: Worker, case: Case, trace_id: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", worker.port)
    headers = {**case.headers, "traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"}
    try:
        connection.request(case.method, case.path, body=case.body or None, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_malformed_requests_get_2xx_or_4xx_and_one_structured_line_each(
    served_worker: Worker, firestore_emulator: FirestoreEmulator
) -> None:
    check_corpus(served_worker, CORPUS, firestore_emulator.project)


def check_corpus(server: Worker, corpus: list[Case], project: str) -> None:
    """Send every case, each with its own trace: the expected status, exactly one JSON line
    for its trace (with the case's severity and message), no traceback, no stray line."""
    log_before = server.log_path.read_text(encoding="utf-8", errors="replace")
    traces = {case.name: uuid.uuid4().hex for case in corpus}
    statuses = {case.name: send(server, case, traces[case.name]) for case in corpus}

    new_text = server.log_path.read_text(encoding="utf-8", errors="replace")[len(log_before) :]
    expected = {case.name: case.expected for case in corpus}
    wrong_status = {name: status for name, status in statuses.items() if status not in expected[name]}
    assert wrong_status == {}, f"unexpected statuses {wrong_status}; log:\n{new_text[-4000:]}"
    assert "Traceback" not in new_text, new_text[-4000:]
    lines = [raw for raw in new_text.splitlines() if raw.strip()]
    not_json = [raw for raw in lines if _json_object(raw) is None]
    assert not_json == [], f"lines that are not one JSON object: {not_json[:5]}"

    records = [_json_object(raw) or {} for raw in lines]
    for case in corpus:
        trace = f"projects/{project}/traces/{traces[case.name]}"
        mine = [record for record in records if record.get("logging.googleapis.com/trace") == trace]
        assert len(mine) == 1, f"{case.name}: {len(mine)} lines for its trace: {mine}"
        assert mine[0]["severity"] == case.severity, (case.name, mine[0])
        assert case.message_contains in mine[0]["message"], (case.name, mine[0])
    assert len(records) == len(corpus), "a line belongs to no request of the corpus"


def test_forged_ids_are_acknowledged_as_poison_naming_the_firestore_rule(
    served_worker: Worker, firestore_emulator: FirestoreEmulator
) -> None:
    reasons = {}
    for case in [case for case in CORPUS if case.name.startswith("forged-")]:
        trace_id = uuid.uuid4().hex
        assert send(served_worker, case, trace_id) == 200, case.name
        trace = f"projects/{firestore_emulator.project}/traces/{trace_id}"
        (line,) = [
            record
            for record in served_worker.log_lines()
            if record.get("logging.googleapis.com/trace") == trace
        ]
        assert (line["severity"], line["code"]) == ("WARNING", "FLOW_RUN_INVALID"), line
        reasons[case.name] = line["reason"]
    assert "'..' is reserved" in reasons["forged-dotdot"]
    assert "'.' is reserved" in reasons["forged-dot"]
    assert "__.*__" in reasons["forged-dunder"]
    assert "2000 bytes" in reasons["forged-2000-bytes"] and "r" * 81 not in reasons["forged-2000-bytes"]
    assert "is not a flow_runs/{runId} document" in reasons["forged-encoded-slash"]


def _json_object(raw: str) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        loaded = json.loads(raw)
        return loaded if isinstance(loaded, dict) else None
    return None


# --- advance_flow: the same corpus, and versions Firestore never writes ----------------------


def versioned(
    name: str, *, seconds: int | None = None, nanos: int | None = None, bad_field: bool = False
) -> Case:
    """A flow_run version advance_flow would plan from (a PENDING step), but carrying what
    Firestore never writes: no update_time, one out of range, or a timestamp field out of range."""
    document = document_resource_name(PROJECT_ID, "flow_runs/RUN1")
    fields = {"runId": "RUN1", "status": "PENDING", "steps": {"s": {"stepType": "X", "status": "PENDING"}}}
    event_data = build_document_event_data(document, fields)
    if seconds is not None or nanos is not None:
        event_data.value.update_time.seconds = 1_795_000_000 if seconds is None else seconds
        event_data.value.update_time.nanos = nanos or 0
    if bad_field:
        event_data.value.update_time.seconds = 1_795_000_000
        event_data.value.fields["createdAt"].timestamp_value.seconds = 10**13
    headers = {**binary_headers(), "ce-type": "google.cloud.firestore.document.v1.written"}
    return Case(name, event_data.SerializeToString(), headers, (200,), message_contains="event ignored")


ADVANCE_CORPUS = [
    *CORPUS,
    versioned("update-time-seconds-1e13", seconds=10**13),
    versioned("update-time-nanos-over-1e9", nanos=10**9 + 1),
    versioned("update-time-negative-nanos", nanos=-1),
    versioned("timestamp-field-1e13", bad_field=True),
    versioned("no-update-time"),
]


@pytest.fixture(scope="module")
def served_advance_flow(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    deleted = build_document_event_data(document_resource_name(PROJECT_ID, "flow_runs/RUN1"), None, {})
    warm_up = Case("warm-up", deleted.SerializeToString(), binary_headers(), (200,))  # a no-op
    with serving("advance_flow", firestore_emulator, tmp_path_factory, warm_up) as server:
        yield server


def test_advance_flow_answers_malformed_events_2xx_or_4xx_with_one_line_each(
    served_advance_flow: Worker, firestore_emulator: FirestoreEmulator
) -> None:
    check_corpus(served_advance_flow, ADVANCE_CORPUS, firestore_emulator.project)


# --- the reaper (HTTP, for Cloud Scheduler): any POST runs a pass, other methods are refused --


def reaper_post(name: str, body: bytes, content_type: str | None = None) -> Case:
    headers = {} if content_type is None else {"content-type": content_type}
    return Case(name, body, headers, (200,), severity="INFO", message_contains="reaper pass finished")


def reaper_refused(method: str) -> Case:
    refused = "the reaper is run by POST"
    return Case(method.lower(), b"", {}, (405,), method=method, message_contains=refused)


REAPER_CORPUS = [
    reaper_post("empty", b""),
    reaper_post("empty-json", b"{}", "application/json"),
    reaper_post("nested-json", NESTED_ARRAY, "application/json"),
    reaper_post("not-utf8-json", NOT_UTF8, "application/json"),
    reaper_post("not-utf8-octets", NOT_UTF8, "application/octet-stream"),
    reaper_post("json-array", b"[1, 2]", "application/json"),
    reaper_post("xml", b"<event/>", "application/xml"),
    reaper_post("form", b"a=b&c=%ff", "application/x-www-form-urlencoded"),
    reaper_post("cloudevent", NESTED_OBJECT, "application/cloudevents+json"),
    reaper_post("big", b"x" * 1_000_000, "text/plain"),
    *(reaper_refused(method) for method in ("GET", "PUT", "DELETE", "PATCH", "OPTIONS")),
    Case("robots", b"", {}, (404,), method="GET", message_contains="request rejected", path="/robots.txt"),
]


@pytest.fixture(scope="module")
def served_reaper(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    firestore_emulator.reset()  # no lease left by another test: one pass, one line
    warm_up = reaper_post("warm-up", b"")
    with serving("reap_expired_leases", firestore_emulator, tmp_path_factory, warm_up) as server:
        yield server


def test_the_reaper_answers_malformed_requests_2xx_or_4xx_with_one_line_each(
    served_reaper: Worker, firestore_emulator: FirestoreEmulator
) -> None:
    check_corpus(served_reaper, REAPER_CORPUS, firestore_emulator.project)
