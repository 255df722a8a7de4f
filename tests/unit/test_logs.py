"""The log line's shape against Cloud Logging's documented special JSON fields.

https://cloud.google.com/logging/docs/structured-logging#structured_logging_special_fields:
the agent lifts `severity`, `message`, `time` (RFC 3339 string) / `timestamp` ({seconds,
nanos} object) / `timestampSeconds`+`timestampNanos`, `httpRequest`, and the
`logging.googleapis.com/` fields insertId, labels (string -> string), operation,
sourceLocation, spanId (16 hex), trace (`projects/<project>/traces/<32 hex>`) and
trace_sampled (boolean) out of the payload.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from worker_chart_export import logs

DOCUMENTED_SPECIAL_FIELDS = {
    "severity",
    "message",
    "time",
    "timestamp",
    "timestampSeconds",
    "timestampNanos",
    "httpRequest",
    "logging.googleapis.com/insertId",
    "logging.googleapis.com/labels",
    "logging.googleapis.com/operation",
    "logging.googleapis.com/sourceLocation",
    "logging.googleapis.com/spanId",
    "logging.googleapis.com/trace",
    "logging.googleapis.com/trace_sampled",
}
LOG_SEVERITIES = {"DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"}
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
TRACE_NAME = re.compile(r"projects/(?P<project>[^/]+)/traces/(?P<trace>[0-9a-f]{32})")
SPAN_ID = re.compile(r"[0-9a-f]{16}")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class Lines:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    def all(self) -> list[dict[str, Any]]:
        raw = self.stream.getvalue().splitlines()
        assert all(line.startswith("{") for line in raw), raw  # one JSON object per line
        return [json.loads(line) for line in raw]

    def only(self) -> dict[str, Any]:
        (line,) = self.all()
        return line


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lines]:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    captured = Lines()
    logs.configure_logging(
        service="worker-chart-export", env="test", stream=captured.stream, project="demo-proj"
    )
    yield captured
    logs.configure_logging(service="worker-chart-export", env="test")


@pytest.fixture
def traced_request() -> Iterator[logs.RequestLog]:
    request, token = logs.begin_request(logs.parse_traceparent(TRACEPARENT))
    yield request
    logs.end_request(token)


def assert_cloud_logging_shape(line: dict[str, Any]) -> None:
    assert line["severity"] in LOG_SEVERITIES
    assert isinstance(line["message"], str)
    assert RFC3339.fullmatch(line["time"]), line["time"]
    # a string where Cloud Logging wants an object would be misread: never written
    assert not {"timestamp", "timestampSeconds", "timestampNanos"} & line.keys()
    special = {key for key in line if key.startswith("logging.googleapis.com/")}
    assert special <= DOCUMENTED_SPECIAL_FIELDS, special
    labels = line.get("logging.googleapis.com/labels", {})
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in labels.items()), labels
    if "logging.googleapis.com/trace" in line:
        assert TRACE_NAME.fullmatch(line["logging.googleapis.com/trace"])
    if "logging.googleapis.com/spanId" in line:
        assert SPAN_ID.fullmatch(line["logging.googleapis.com/spanId"])
    if "logging.googleapis.com/trace_sampled" in line:
        assert isinstance(line["logging.googleapis.com/trace_sampled"], bool)


def test_a_line_has_severity_message_and_an_rfc3339_time(lines: Lines) -> None:
    before = datetime.now(UTC)
    logs.get_logger().warning("something odd", detail=3)
    after = datetime.now(UTC)
    line = lines.only()
    assert_cloud_logging_shape(line)
    assert (line["severity"], line["message"], line["detail"]) == ("WARNING", "something odd", 3)
    written = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    # the moment of the call, however long it took (the line's microseconds may round up)
    assert before - timedelta(microseconds=1) <= written <= after + timedelta(microseconds=1)
    assert list(line)[:3] == ["severity", "message", "time"]


def test_a_request_trace_becomes_the_documented_trace_fields(
    lines: Lines, traced_request: logs.RequestLog
) -> None:
    logs.get_logger().info("first")
    logs.get_logger().error("second")
    first, second = lines.all()
    for line in (first, second):
        assert_cloud_logging_shape(line)
        assert line["logging.googleapis.com/trace"] == f"projects/demo-proj/traces/{TRACE_ID}"
        assert line["logging.googleapis.com/spanId"] == "00f067aa0ba902b7"
        assert line["logging.googleapis.com/trace_sampled"] is True
    assert traced_request.lines == 2


def test_without_a_request_or_a_trace_no_trace_field_is_written(lines: Lines) -> None:
    logs.get_logger().info("outside any request")
    request, token = logs.begin_request(None)
    try:
        logs.get_logger().info("a request without trace headers")
    finally:
        logs.end_request(token)
    assert all("logging.googleapis.com/trace" not in line and "traceId" not in line for line in lines.all())
    assert request.lines == 1


def test_without_a_project_the_trace_id_is_kept_as_a_plain_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    captured = Lines()
    logs.configure_logging(service="s", env="test", stream=captured.stream)
    _, token = logs.begin_request(logs.parse_traceparent(TRACEPARENT))
    try:
        logs.get_logger().info("no project")
    finally:
        logs.end_request(token)
        logs.configure_logging(service="worker-chart-export", env="test")
    line = captured.only()
    assert line["traceId"] == TRACE_ID
    assert "logging.googleapis.com/trace" not in line  # `projects//traces/...` would be malformed


def test_the_project_is_read_from_google_cloud_project_when_logging_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    captured = Lines()
    # a request that began before logging was configured (its first line configures it)
    _, token = logs.begin_request(logs.parse_cloud_trace_context(f"{TRACE_ID}/1;o=1"))
    try:
        logs.configure_logging(service="s", env="test", stream=captured.stream)
        logs.get_logger().info("traced")
    finally:
        logs.end_request(token)
        logs.configure_logging(service="worker-chart-export", env="test")
    assert captured.only()["logging.googleapis.com/trace"] == f"projects/from-env/traces/{TRACE_ID}"


def test_run_and_step_ids_are_string_labels_and_stay_in_the_payload(lines: Lines) -> None:
    logs.get_logger().info("bound", runId="run_1", stepId=7)
    with structlog.contextvars.bound_contextvars(runId="run_2"):  # as execute_step binds them
        logs.get_logger().info("from the context", stepId=None)
    logs.get_logger().info("no ids")
    bound, from_context, no_ids = lines.all()
    for line in (bound, from_context, no_ids):
        assert_cloud_logging_shape(line)
    assert bound["logging.googleapis.com/labels"] == {"runId": "run_1", "stepId": "7"}
    assert (bound["runId"], bound["stepId"]) == ("run_1", 7)
    assert from_context["logging.googleapis.com/labels"] == {"runId": "run_2"}
    assert "logging.googleapis.com/labels" not in no_ids


def test_payload_keys_that_would_collide_with_special_fields_are_renamed(
    lines: Lines, traced_request: logs.RequestLog
) -> None:
    forged = {
        "timestamp": "2026-01-01T00:00:00Z",
        "httpRequest": {"status": "not a number"},
        "severity": "EMERGENCY",
        "logging.googleapis.com/trace": "projects/other/traces/forged",
        "logging.googleapis.com/labels": {"runId": 1},
    }
    logs.get_logger().info("careless call", **forged)
    line = lines.only()
    assert_cloud_logging_shape(line)
    assert line["severity"] == "INFO"
    assert line["logging.googleapis.com/trace"] == f"projects/demo-proj/traces/{TRACE_ID}"
    assert {key: line[logs.payload_name(key)] for key in forged} == forged
    assert line["trace_"] == "projects/other/traces/forged"


def test_an_exception_stays_inside_its_one_line(lines: Lines) -> None:
    try:
        raise KeyError("boom")
    except KeyError:
        logs.get_logger().error("it failed", exc_info=True)
    line = lines.only()
    assert_cloud_logging_shape(line)
    assert "KeyError: 'boom'" in line["exception"]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (TRACEPARENT, logs.Trace(TRACE_ID, "00f067aa0ba902b7", True)),
        (f"00-{TRACE_ID}-00f067aa0ba902b7-00", logs.Trace(TRACE_ID, "00f067aa0ba902b7", False)),
        (f" 01-{TRACE_ID}-00f067aa0ba902b7-03-future ", logs.Trace(TRACE_ID, "00f067aa0ba902b7", True)),
        (f"ff-{TRACE_ID}-00f067aa0ba902b7-01", None),  # version ff is invalid
        (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),  # all-zero trace id
        (f"00-{TRACE_ID}-{'0' * 16}-01", None),  # all-zero parent id
        (f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01", None),  # the spec says lower-case hex
        (f"00-{TRACE_ID}-00f067aa0ba902b7", None),
        ('00-4bf92f3577b34da6a3ce929d0e0e4736"}\n{"severity":"EMERGENCY', None),
        ("", None),
        (None, None),
    ],
)
def test_traceparent_parsing(header: str | None, expected: logs.Trace | None) -> None:
    assert logs.parse_traceparent(header) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"{TRACE_ID}/123;o=1", logs.Trace(TRACE_ID, "000000000000007b", True)),
        (f"{TRACE_ID.upper()}/18446744073709551615;o=0", logs.Trace(TRACE_ID, "ffffffffffffffff", False)),
        (f"{TRACE_ID}/0;o=1", logs.Trace(TRACE_ID, None, True)),  # span 0: no span
        (f"{TRACE_ID}/18446744073709551616", logs.Trace(TRACE_ID, None, None)),  # > uint64
        (TRACE_ID, logs.Trace(TRACE_ID, None, None)),
        (f"{'0' * 32}/1;o=1", None),
        ("not-a-trace/1;o=1", None),
        (f"{TRACE_ID}/12x;o=1", None),
        (None, None),
    ],
)
def test_x_cloud_trace_context_parsing(header: str | None, expected: logs.Trace | None) -> None:
    assert logs.parse_cloud_trace_context(header) == expected


def test_the_request_headers_win_over_the_event_extension() -> None:
    other = "0af7651916cd43dd8448eb211c80319c"
    event = f"00-{other}-b7ad6b7169203331-01"
    assert logs.first_trace(TRACEPARENT, f"{other}/1;o=1", event).trace_id == TRACE_ID  # type: ignore[union-attr]
    assert logs.first_trace("garbage", f"{TRACE_ID}/1;o=1", event).trace_id == TRACE_ID  # type: ignore[union-attr]
    assert logs.first_trace(None, None, event).trace_id == other  # type: ignore[union-attr]
    assert logs.first_trace(None, None, None) is None


def test_a_request_adopts_the_event_trace_only_when_it_has_none() -> None:
    event_trace = logs.Trace("0af7651916cd43dd8448eb211c80319c", None, None)
    request = logs.RequestLog(logs.parse_traceparent(TRACEPARENT))
    request.set_trace(event_trace)
    assert request.trace is not None and request.trace.trace_id == TRACE_ID
    bare = logs.RequestLog()
    bare.set_trace(event_trace)
    assert bare.trace == event_trace
