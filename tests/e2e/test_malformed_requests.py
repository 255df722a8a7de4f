"""Malformed requests against the served worker (`worker-chart-export serve`, its own process,
pointed at the Firestore emulator): each is answered 2xx or 4xx, leaves exactly one JSON line
in the worker's log, and no line anywhere carries a traceback.

Each request carries its own W3C `traceparent`, so its lines are told apart by their
`logging.googleapis.com/trace`, which also checks that lines written before our function
ran (the cloudevents SDK failing on the body) belong to their request's trace.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.stack import Worker, start_worker
from harness.firestore_emulator import FirestoreEmulator, free_port
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


@pytest.fixture(scope="module")
def served_worker(
    firestore_emulator: FirestoreEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    log_path = Path(tmp_path_factory.mktemp("malformed")) / "worker.log"
    worker = start_worker(
        free_port(),
        {
            "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
            "GOOGLE_CLOUD_PROJECT": firestore_emulator.project,
            "CHARTS_API_MODE": "mock",
            "APP_ENV": "e2e",
        },
        log_path,
    )
    try:
        # a well-formed no-op event first: the server is warm and its start-up lines written
        body = build_document_event_data(document_resource_name(PROJECT_ID, "flow_runs/RUN1"), {"steps": {}})
        warm_up = Case("warm-up", body.SerializeToString(), binary_headers(), (200,))
        assert send(worker, warm_up, uuid.uuid4().hex) == 200, worker.log_tail()
        yield worker
    finally:
        worker.stop()


def send(worker: Worker, case: Case, trace_id: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=60)
    headers = {**case.headers, "traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"}
    try:
        connection.request(case.method, "/", body=case.body or None, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_malformed_requests_get_2xx_or_4xx_and_one_structured_line_each(
    served_worker: Worker, firestore_emulator: FirestoreEmulator
) -> None:
    log_before = served_worker.log_path.read_text(encoding="utf-8", errors="replace")
    traces = {case.name: uuid.uuid4().hex for case in CORPUS}
    statuses = {case.name: send(served_worker, case, traces[case.name]) for case in CORPUS}

    new_text = served_worker.log_path.read_text(encoding="utf-8", errors="replace")[len(log_before) :]
    wrong_status = {name: status for name, status in statuses.items() if status not in _case(name).expected}
    assert wrong_status == {}, f"unexpected statuses {wrong_status}; log:\n{new_text[-4000:]}"
    assert "Traceback" not in new_text, new_text[-4000:]
    lines = [raw for raw in new_text.splitlines() if raw.strip()]
    not_json = [raw for raw in lines if _json_object(raw) is None]
    assert not_json == [], f"lines that are not one JSON object: {not_json[:5]}"

    records = [_json_object(raw) or {} for raw in lines]
    for case in CORPUS:
        trace = f"projects/{firestore_emulator.project}/traces/{traces[case.name]}"
        mine = [record for record in records if record.get("logging.googleapis.com/trace") == trace]
        assert len(mine) == 1, f"{case.name}: {len(mine)} lines for its trace: {mine}"
        assert mine[0]["severity"] == case.severity, (case.name, mine[0])
        assert case.message_contains in mine[0]["message"], (case.name, mine[0])
    assert len(records) == len(CORPUS), "a line belongs to no request of the corpus"


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


def _case(name: str) -> Case:
    return next(case for case in CORPUS if case.name == name)


def _json_object(raw: str) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        loaded = json.loads(raw)
        return loaded if isinstance(loaded, dict) else None
    return None
