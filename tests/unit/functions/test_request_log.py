"""The request log middleware on its own (functions/serve.py): around a plain WSGI app, the one
line a request nothing else logged leaves, its severity by status, its trace and what
identifies the request; and what the app is handed back untouched."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from harness.logs import LogCapture
from worker_chart_export import logs
from worker_chart_export.functions.serve import RequestLogMiddleware

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ENVIRON = {
    "REQUEST_METHOD": "POST",
    "PATH_INFO": "/",
    "CONTENT_TYPE": "application/protobuf",
    "CONTENT_LENGTH": "12",
    "HTTP_CE_ID": "evt-9",
    "HTTP_CE_TYPE": "google.cloud.firestore.document.v1.updated",
}
SUMMARY = {
    "httpMethod": "POST",
    "httpPath": "/",
    "contentType": "application/protobuf",
    "contentLength": "12",
    "eventId": "evt-9",
    "eventType": "google.cloud.firestore.document.v1.updated",
}


def answering(status: str | None, *, logs_a_line: bool = False) -> Callable[..., Iterable[bytes]]:
    """A WSGI app answering `status` (None: it fails before answering), with headers and the
    exc_info it was given back to the server, logging a line of its own when told."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if logs_a_line:
            logs.configured_logger().info("the app's own line")
        if status is None:
            raise RuntimeError("failed before answering")
        start_response(status, [("X-Answer", "1")], ("exc", "info", "tb"))
        return [b"body"]

    return app


class Server:
    """What the WSGI server is handed: every start_response call."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, ...]] = []

    def start_response(self, status: str, headers: Any, exc_info: Any = None) -> Callable[[bytes], None]:
        self.started.append((status, headers, exc_info))
        return lambda data: None


def serve(app: Callable[..., Iterable[bytes]], **environ: str) -> tuple[Server, Iterable[bytes]]:
    server = Server()
    body = RequestLogMiddleware(app)({**ENVIRON, **environ}, server.start_response)
    return server, body


@pytest.mark.parametrize(
    ("status", "severity", "message", "code"),
    [
        ("204 NO CONTENT", "INFO", "request answered", 204),
        ("399 ODD", "INFO", "request answered", 399),
        ("400 BAD REQUEST", "WARNING", "request rejected", 400),
        ("499 CLIENT CLOSED", "WARNING", "request rejected", 499),
        ("500 INTERNAL SERVER ERROR", "ERROR", "request rejected", 500),
        ("503 SERVICE UNAVAILABLE", "ERROR", "request rejected", 503),
        ("abc what", "ERROR", "request rejected", 500),  # no status code: the server's failure
    ],
)
def test_a_request_nothing_logged_leaves_one_line_by_its_status(
    log_capture: LogCapture, status: str, severity: str, message: str, code: int
) -> None:
    server, body = serve(answering(status))
    assert list(body) == [b"body"]
    assert server.started == [(status, [("X-Answer", "1")], ("exc", "info", "tb"))]  # passed on as given
    [line] = log_capture.lines()
    assert (line["severity"], line["message"], line["httpStatus"]) == (severity, message, code)
    assert {key: line[key] for key in SUMMARY} == SUMMARY


def test_an_app_that_answered_nothing_is_logged_as_a_500(log_capture: LogCapture) -> None:
    with pytest.raises(RuntimeError):
        serve(answering(None))
    [line] = log_capture.lines()
    assert (line["severity"], line["message"], line["httpStatus"]) == ("ERROR", "request rejected", 500)


def test_a_request_the_app_logged_leaves_no_second_line(log_capture: LogCapture) -> None:
    serve(answering("400 BAD REQUEST", logs_a_line=True))
    assert [line["message"] for line in log_capture.lines()] == ["the app's own line"]


@pytest.mark.parametrize(
    "header",
    [
        {"HTTP_TRACEPARENT": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
        {"HTTP_X_CLOUD_TRACE_CONTEXT": f"{TRACE_ID}/123;o=1"},
        {"HTTP_CE_TRACEPARENT": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
    ],
    ids=["traceparent", "x-cloud-trace-context", "ce-traceparent"],
)
def test_the_line_of_a_request_rejected_before_the_function_carries_its_trace(
    log_capture: LogCapture, monkeypatch: pytest.MonkeyPatch, header: dict[str, str]
) -> None:
    monkeypatch.setattr(logs, "_trace_project", "demo-project")
    serve(answering("405 METHOD NOT ALLOWED"), **header)
    [line] = log_capture.lines()
    assert line["logging.googleapis.com/trace"] == f"projects/demo-project/traces/{TRACE_ID}"


def test_a_long_value_of_the_request_is_cut_after_300_characters(log_capture: LogCapture) -> None:
    serve(answering("415 UNSUPPORTED MEDIA TYPE"), CONTENT_TYPE="x" * 301, HTTP_CE_TYPE="t" * 300)
    [line] = log_capture.lines()
    assert line["contentType"] == "x" * 300 + "... (301 chars)"
    assert line["eventType"] == "t" * 300  # up to 300: whole
