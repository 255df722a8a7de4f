"""advance_flow and the reaper as served functions (functions-framework's app, in-process):
a created run is advanced, a malformed event or request is never a 5xx and leaves one line,
a store outage is one line without a traceback."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient

from harness.logs import LogCapture
from harness.secret_scan import key_forms, leaks
from worker_chart_export import known_keys
from worker_chart_export.bootstrap import ReaperParts
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.redaction import REDACTED
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate
from worker_chart_export.functions.serve import create_function_app
from worker_chart_export.service.reaper import DEFAULT_BATCH
from worker_chart_export.testing import FakeClock, build_document_event_data, document_resource_name

RUN_ID = "RUN1"
PROJECT = "demo-project"
DOC_NAME = document_resource_name(PROJECT, f"flow_runs/{RUN_ID}")
UPDATE_TIME = datetime(2026, 11, 22, 4, 8, 40, 123456, tzinfo=UTC)
WRITTEN = "google.cloud.firestore.document.v1.written"
DEPTH = 100_000


def run_fields(status: str = "PENDING", step_status: str = "PENDING") -> dict[str, Any]:
    steps = {"charts": {"stepType": "CHART_EXPORT", "status": step_status, "dependsOn": []}}
    return {"runId": RUN_ID, "flowKey": "daily", "status": status, "scope": {"symbol": "BTC"}, "steps": steps}


def event_body(
    fields: dict[str, Any] | None,
    old_fields: dict[str, Any] | None = None,
    *,
    name: str = DOC_NAME,
    seconds: int | None = None,
    nanos: int = 0,
) -> bytes:
    """A DocumentEventData as Firestore writes it: `fields` None is a delete, `old_fields`
    None a creation; the new version carries UPDATE_TIME unless `seconds`/`nanos` forge it."""
    event_data = build_document_event_data(name, fields, old_fields)
    if fields is not None:
        event_data.value.update_time.FromDatetime(UPDATE_TIME)
        if seconds is not None:
            event_data.value.update_time.seconds = seconds
        if nanos:
            event_data.value.update_time.nanos = nanos
    body: bytes = event_data.SerializeToString()
    return body


def headers(path: str = f"flow_runs/{RUN_ID}", content_type: str = "application/protobuf") -> dict[str, str]:
    return {
        "ce-id": "evt-1",
        "ce-source": f"//firestore.googleapis.com/projects/{PROJECT}/databases/(default)",
        "ce-type": WRITTEN,
        "ce-specversion": "1.0",
        "ce-subject": f"documents/{path}",
        "content-type": content_type,
    }


@dataclass
class FakeAdvanceStore:
    writes: list[tuple[str, AdvancePlan, datetime]] = field(default_factory=list)
    fails: bool = False

    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        if self.fails:
            raise TransientStoreError("advance of flow_runs/RUN1: Firestore unavailable (503)")
        self.writes.append((run_id, plan, last_update_time))
        return True


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAdvanceStore]:
    import worker_chart_export.bootstrap as bootstrap_module

    fake = FakeAdvanceStore()
    monkeypatch.setattr(bootstrap_module, "runtime", lambda: SimpleNamespace(advance_store=lambda: fake))
    yield fake


@pytest.fixture(scope="module")
def advance(served_main: None) -> FlaskClient:
    return create_function_app("advance_flow").test_client()


def only(lines: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(lines) == 1, lines
    return lines[0]


# --- advance_flow -------------------------------------------------------------------------


def test_a_created_run_is_advanced_on_the_version_the_event_carries(
    advance: FlaskClient, store: FakeAdvanceStore, log_capture: LogCapture
) -> None:
    response = advance.post("/", data=event_body(run_fields()), headers=headers())
    assert response.status_code == 200
    ((run_id, plan, last_update_time),) = store.writes
    assert (run_id, plan.ready_step_ids, plan.run_status) == (RUN_ID, ("charts",), "RUNNING")
    assert last_update_time == UPDATE_TIME  # the precondition: a stale event cannot write
    line = only(log_capture.lines())
    assert (line["message"], line["outcome"], line["created"]) == ("advance_flow", "WRITTEN", True)


def test_an_update_with_nothing_to_do_writes_nothing(
    advance: FlaskClient, store: FakeAdvanceStore, log_capture: LogCapture
) -> None:
    fields = run_fields("RUNNING", "READY")
    response = advance.post("/", data=event_body(fields, run_fields()), headers=headers())
    assert response.status_code == 200
    assert store.writes == []
    line = only(log_capture.lines())
    assert (line["outcome"], line["created"]) == ("UNCHANGED", False)


def test_a_deleted_run_is_a_noop(
    advance: FlaskClient, store: FakeAdvanceStore, log_capture: LogCapture
) -> None:
    response = advance.post("/", data=event_body(None, run_fields()), headers=headers())
    assert response.status_code == 200
    assert store.writes == []
    assert only(log_capture.lines())["message"] == "advance_flow: flow_run deleted, nothing to advance"


def test_a_store_outage_is_a_500_with_one_line_and_no_traceback(
    advance: FlaskClient, store: FakeAdvanceStore, log_capture: LogCapture
) -> None:
    store.fails = True
    response = advance.post("/", data=event_body(run_fields()), headers=headers())
    assert response.status_code == 500  # Eventarc redelivers: advancing is idempotent
    line = only(log_capture.lines())
    assert (line["severity"], line["runId"]) == ("ERROR", RUN_ID)
    assert "Firestore unavailable" in line["reason"]
    assert "exception" not in line and "Traceback" not in log_capture.text


def timestamp_field_body() -> bytes:
    event_data = build_document_event_data(DOC_NAME, run_fields())
    event_data.value.update_time.FromDatetime(UPDATE_TIME)
    event_data.value.fields["createdAt"].timestamp_value.seconds = 10**13
    body: bytes = event_data.SerializeToString()
    return body


def named(path: str) -> bytes:
    return event_body(run_fields(), name=document_resource_name(PROJECT, path))


JSON = "application/json"
CLOUDEVENTS_JSON = {"content-type": "application/cloudevents+json"}
NO_UPDATE_TIME = build_document_event_data(DOC_NAME, run_fields()).SerializeToString()
LONG_ID = "flow_runs/" + "r" * 2000
# (name, body, headers, expected statuses): each answered with one WARNING line
ADVANCE_CORPUS: list[tuple[str, bytes, dict[str, str], tuple[int, ...]]] = [
    # what Firestore never writes: acknowledged as poison
    ("update-time-seconds-1e13", event_body(run_fields(), seconds=10**13), headers(), (200,)),
    ("update-time-nanos-over-1e9", event_body(run_fields(), nanos=10**9 + 1), headers(), (200,)),
    ("update-time-year-0", event_body(run_fields(), seconds=-62_135_596_801), headers(), (200,)),
    ("timestamp-field-1e13", timestamp_field_body(), headers(), (200,)),
    ("no-update-time", NO_UPDATE_TIME, headers(), (200,)),
    ("garbage", b"\xff\xfe\x00 not protobuf", headers(), (200,)),
    ("base64-garbage", base64.b64encode(b"\xff\xfe\x00 not protobuf"), headers(), (200,)),
    ("empty-binary", b"", headers(), (200,)),
    ("no-document", b"\n\x00", headers(), (200,)),
    ("wrong-collection", named("users/U1"), headers("users/U1"), (200,)),
    ("nested-path", named("flow_runs/R/x/Y"), headers("flow_runs/R/x/Y"), (200,)),
    ("subject-disagrees", event_body(run_fields()), headers("flow_runs/OTHER"), (200,)),
    ("forged-dotdot", named("flow_runs/.."), headers("flow_runs/.."), (200,)),
    ("forged-dunder", named("flow_runs/__x__"), headers("flow_runs/__x__"), (200,)),
    ("forged-2000-bytes", named(LONG_ID), headers(LONG_ID), (200,)),
    ("infinite-null", b'{"value":{"name":"x","fields":{"n":{"nullValue":Infinity}}}}', headers(), (200,)),
    ("not-utf8-json", b"\xff\xfe\xfa\x80", headers(content_type=JSON), (200,)),
    ("text-plain", b"hello", headers(content_type="text/plain"), (200,)),
    # what the CloudEvents SDK cannot read: rejected before our function runs
    ("nested-structured", b"[" * DEPTH + b"]" * DEPTH, CLOUDEVENTS_JSON, (400,)),
    ("nested-binary-json", b"[" * DEPTH + b"]" * DEPTH, headers(content_type=JSON), (400,)),
    # the SDK parses a JSON-looking body whatever its content type
    ("deep-json-as-protobuf", b'{"value":' * DEPTH + b"1" + b"}" * DEPTH, headers(), (400,)),
    ("json-array-structured", b"[1, 2]", CLOUDEVENTS_JSON, (400,)),
    ("not-an-event", b'{"hello": "world"}', {"content-type": JSON}, (400,)),
    ("empty-no-headers", b"", {}, (400, 415)),
]


@pytest.mark.parametrize(
    ("body", "request_headers", "expected"),
    [case[1:] for case in ADVANCE_CORPUS],
    ids=[case[0] for case in ADVANCE_CORPUS],
)
def test_a_malformed_event_is_never_a_5xx_and_leaves_one_line(
    advance: FlaskClient,
    store: FakeAdvanceStore,
    log_capture: LogCapture,
    body: bytes,
    request_headers: dict[str, str],
    expected: tuple[int, ...],
) -> None:
    response = advance.post("/", data=body, headers=request_headers)
    assert response.status_code in expected
    line = only(log_capture.lines())
    assert line["severity"] == "WARNING", line
    assert "exception" not in line and "Traceback" not in log_capture.text
    assert store.writes == []


def test_forged_timestamps_are_named_in_the_warning(
    advance: FlaskClient, store: FakeAdvanceStore, log_capture: LogCapture
) -> None:
    response = advance.post("/", data=event_body(run_fields(), seconds=10**13), headers=headers())
    assert response.status_code == 200
    line = only(log_capture.lines())
    assert line["message"] == "event ignored: not a decodable flow_run event"
    assert line["code"] == "FLOW_RUN_INVALID"
    assert "Seconds 10000000000000 must be in range" in line["reason"]
    assert line["eventType"] == WRITTEN


def test_a_get_is_a_405_with_one_line(advance: FlaskClient, log_capture: LogCapture) -> None:
    assert advance.get("/").status_code == 405
    assert only(log_capture.lines())["httpStatus"] == 405


# --- the reaper ---------------------------------------------------------------------------


@dataclass
class FakeLeaseReaper:
    """The lease store; it records what it is asked, so a value dropped on the way shows."""

    leases: list[ExpiredLease] = field(default_factory=list)
    fails: bool = False
    failure: str = "query of expired step_leases: Firestore unavailable (503)"
    listings: list[tuple[datetime, int]] = field(default_factory=list)  # (now, limit)
    reaps: list[tuple[ExpiredLease, datetime, int]] = field(default_factory=list)  # max_attempts last

    @property
    def passes(self) -> int:
        return len(self.listings)

    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]:
        self.listings.append((now, limit))
        if self.fails:
            raise TransientStoreError(self.failure)
        return list(self.leases)

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate:
        self.reaps.append((lease, now, max_attempts))
        return LeaseFate.RETRIED


REAPER_CLOCK = FakeClock(datetime(2026, 11, 22, 5, 30, tzinfo=UTC))
STEP_MAX_ATTEMPTS = 7  # not the default (3): a pass that drops the setting reaps with 3


@pytest.fixture
def lease_reaper(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLeaseReaper]:
    import worker_chart_export.bootstrap as bootstrap_module

    fake = FakeLeaseReaper()
    reaper = ReaperParts(fake, REAPER_CLOCK, STEP_MAX_ATTEMPTS)
    monkeypatch.setattr(bootstrap_module, "runtime", lambda: SimpleNamespace(reaper=lambda: reaper))
    yield fake


@pytest.fixture(scope="module")
def reaper(served_main: None) -> FlaskClient:
    return create_function_app("reap_expired_leases").test_client()


REAPER_POSTS: list[tuple[str, bytes, dict[str, str]]] = [
    ("empty", b"", {}),
    ("empty-json", b"{}", {"content-type": JSON}),
    ("garbage", b"\xff\xfe\x00 \x80", {"content-type": "application/octet-stream"}),
    ("not-utf8-json", b"\xff\xfe\xfa\x80", {"content-type": JSON}),
    ("nested-json", b"[" * DEPTH + b"]" * DEPTH, {"content-type": JSON}),
    ("json-array", b"[1, 2]", {"content-type": JSON}),
    ("form", b"a=b&c=%ff", {"content-type": "application/x-www-form-urlencoded"}),
    ("cloudevent", event_body(run_fields()), headers()),
    ("big", b"x" * 1_000_000, {"content-type": "text/plain"}),
]


@pytest.mark.parametrize(
    ("body", "request_headers"), [case[1:] for case in REAPER_POSTS], ids=[case[0] for case in REAPER_POSTS]
)
def test_any_post_body_runs_one_pass_and_leaves_one_line(
    reaper: FlaskClient,
    lease_reaper: FakeLeaseReaper,
    log_capture: LogCapture,
    body: bytes,
    request_headers: dict[str, str],
) -> None:
    response = reaper.post("/", data=body, headers=request_headers)
    assert response.status_code == 200
    assert json.loads(response.data)["errors"] == []
    assert lease_reaper.passes == 1  # the body is not read: Cloud Scheduler's POST is the signal
    assert only(log_capture.lines())["message"] == "reaper pass finished"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_another_method_is_a_405_with_one_line_and_no_pass(
    reaper: FlaskClient, lease_reaper: FakeLeaseReaper, log_capture: LogCapture, method: str
) -> None:
    response = reaper.open("/", method=method)
    assert response.status_code == 405
    assert lease_reaper.passes == 0
    line = only(log_capture.lines())
    assert (line["severity"], line["httpStatus"], line["httpMethod"]) == ("WARNING", 405, method)


def test_a_path_functions_framework_reserves_is_a_404_with_one_line(
    reaper: FlaskClient, lease_reaper: FakeLeaseReaper, log_capture: LogCapture
) -> None:
    assert reaper.post("/robots.txt").status_code == 404
    assert lease_reaper.passes == 0
    assert only(log_capture.lines())["httpStatus"] == 404


def test_a_pass_reaps_with_the_attempts_and_the_clock_of_its_runtime(
    reaper: FlaskClient, lease_reaper: FakeLeaseReaper, log_capture: LogCapture
) -> None:
    """STEP_MAX_ATTEMPTS reaches every reap of the HTTP pass (the runtime's ReaperParts)."""
    leases = [
        ExpiredLease(f"doc{i}", f"run{i}", "charts", f"tok{i}", "2026-11-22T05:00:00.000Z") for i in (1, 2)
    ]
    lease_reaper.leases = leases
    response = reaper.post("/")
    assert response.status_code == 200
    now = REAPER_CLOCK.now()
    assert lease_reaper.listings == [(now, DEFAULT_BATCH)]
    assert lease_reaper.reaps == [(lease, now, STEP_MAX_ATTEMPTS) for lease in leases]
    assert json.loads(response.data)["counts"] == {"retried": 2}


def test_a_store_outage_is_a_503_with_one_line_and_no_traceback(
    reaper: FlaskClient, lease_reaper: FakeLeaseReaper, log_capture: LogCapture
) -> None:
    lease_reaper.fails = True
    response = reaper.post("/")
    assert response.status_code == 503
    assert "Firestore unavailable" in json.loads(response.data)["error"]
    line = only(log_capture.lines())
    assert (line["severity"], line["httpStatus"]) == ("ERROR", 503)
    assert "exception" not in line and "Traceback" not in log_capture.text


def test_a_store_outage_answers_no_form_of_a_key_its_error_quotes(
    reaper: FlaskClient, lease_reaper: FakeLeaseReaper, log_capture: LogCapture
) -> None:
    """The 503 quotes the store's error: an answer, redacted like every other (serve.py)."""
    key = "test-key-3c9e1f7a5b2d4c6e8a0f1b3d"
    known_keys.learn([key])
    lease_reaper.fails = True
    lease_reaper.failure = "Firestore unavailable (" + " ".join(key_forms(key).values()) + ")"
    response = reaper.post("/")
    assert response.status_code == 503
    error = json.loads(response.data)["error"]
    assert error.startswith("Firestore unavailable (") and REDACTED in error
    assert leaks([response.get_data(as_text=True), log_capture.text], [key]) == []
