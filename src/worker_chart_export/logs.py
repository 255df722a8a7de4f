"""structlog set-up: one JSON object per line, in the shape Cloud Logging's agent reads.

Cloud Run's logging agent turns each stdout line that is a JSON object into a LogEntry and
lifts these documented special fields out of the payload
(https://cloud.google.com/logging/docs/structured-logging#structured_logging_special_fields):
- `severity` (DEBUG..CRITICAL), `message` (the text shown in the log list);
- `time`: an RFC 3339 string (`timestamp` is reserved for a {seconds, nanos} object, so a
  string there would be dropped or misread: we never write `timestamp`);
- `logging.googleapis.com/trace` = `projects/<project>/traces/<32-hex trace id>`, with
  `logging.googleapis.com/spanId` (16 hex) and `logging.googleapis.com/trace_sampled`: the
  trace of the request being served, so one invocation's lines group together (and under
  Cloud Run's own request log entry);
- `logging.googleapis.com/labels`: a string -> string map; we put `runId`/`stepId` there
  (they also stay in the payload, where queries and metric filters already look).
A payload key that would collide with a special field by accident (say `timestamp=` or
`httpRequest=` passed to a log call) is renamed with a trailing `_` (`timestamp_`; a
`logging.googleapis.com/trace` key becomes `trace_`).

The trace's project is GOOGLE_CLOUD_PROJECT, read once when logging is configured (the
deploy sets it). The metadata server is never asked: that would put an HTTP call on the
no-op path or in start-up. Without a project the id is still written, as a plain `traceId`.

Every line leaves through `_without_keys`, the last processor: no form of an API key the
process holds (known_keys, core/redaction.py) is in it. A line with nothing to redact costs
one sieve over its text (benchmarks/bench_redaction.py); one with a find is redacted value by
value and rendered again, so it stays one JSON object.

Per request (see `serve.py`'s middleware), a `RequestLog` in a context variable carries the
trace fields and counts the lines written, so that every request leaves at least one line.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict

from worker_chart_export import known_keys

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}

TRACE_KEY = "logging.googleapis.com/trace"
SPAN_ID_KEY = "logging.googleapis.com/spanId"
TRACE_SAMPLED_KEY = "logging.googleapis.com/trace_sampled"
LABELS_KEY = "logging.googleapis.com/labels"
LABEL_FIELDS = ("runId", "stepId")
# Top-level keys the agent interprets: only this module may write them.
_SPECIAL_FIELDS = frozenset(
    {
        "severity",
        "message",
        "time",
        "timestamp",
        "timestampSeconds",
        "timestampNanos",
        "httpRequest",
        TRACE_KEY,
        SPAN_ID_KEY,
        TRACE_SAMPLED_KEY,
        LABELS_KEY,
        "logging.googleapis.com/insertId",
        "logging.googleapis.com/operation",
        "logging.googleapis.com/sourceLocation",
    }
)

# W3C Trace Context: version-traceid-parentid-flags (lower-case hex; version ff is invalid)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?", re.DOTALL)
# Google's legacy header: TRACE_ID/SPAN_ID;o=OPTIONS, the span id in decimal
_CLOUD_TRACE_CONTEXT = re.compile(r"([0-9a-fA-F]{32})(?:/([0-9]{1,20}))?(?:;o=([0-9]+))?")
_ZERO_TRACE = "0" * 32


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str  # 32 lower-case hex digits
    span_id: str | None  # 16 lower-case hex digits
    sampled: bool | None


def parse_traceparent(header: str | None) -> Trace | None:
    """A W3C `traceparent` value -> Trace; None when absent or malformed (untrusted input)."""
    match = _TRACEPARENT.fullmatch(header.strip()) if header else None
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == "0" * 16:
        return None
    return Trace(trace_id, span_id, bool(int(flags, 16) & 1))


def parse_cloud_trace_context(header: str | None) -> Trace | None:
    """An `X-Cloud-Trace-Context` value -> Trace (span id converted to hex, as the LogEntry
    wants it); None when absent or malformed."""
    match = _CLOUD_TRACE_CONTEXT.fullmatch(header.strip()) if header else None
    if match is None:
        return None
    trace_id, span, options = match.groups()
    if trace_id.lower() == _ZERO_TRACE:
        return None
    span_number = int(span) if span else 0
    span_id = f"{span_number:016x}" if 0 < span_number < 2**64 else None
    return Trace(trace_id.lower(), span_id, None if options is None else options == "1")


def first_trace(
    traceparent: str | None = None,
    cloud_trace_context: str | None = None,
    event_traceparent: str | None = None,
) -> Trace | None:
    """The request's own trace headers first (Cloud Run's request log entry carries that
    trace, so our lines nest under it), then the CloudEvent's `traceparent` extension."""
    if traceparent is None and cloud_trace_context is None and event_traceparent is None:
        return None  # the usual case in tests and benchmarks: no parsing at all
    return (
        parse_traceparent(traceparent)
        or parse_cloud_trace_context(cloud_trace_context)
        or parse_traceparent(event_traceparent)
    )


def trace_fields(trace: Trace | None, project: str | None) -> dict[str, Any]:
    """The special fields for `trace` (empty without one)."""
    if trace is None:
        return {}
    fields: dict[str, Any] = (
        {TRACE_KEY: f"projects/{project}/traces/{trace.trace_id}"} if project else {"traceId": trace.trace_id}
    )
    if trace.span_id is not None:
        fields[SPAN_ID_KEY] = trace.span_id
    if trace.sampled is not None:
        fields[TRACE_SAMPLED_KEY] = trace.sampled
    return fields


@dataclass(slots=True)
class RequestLog:
    """What the lines of one request share, and how many were written."""

    trace: Trace | None = None
    lines: int = 0
    entered: bool = False  # our function started (what fails before is the request's fault)
    # the trace's special fields, built at the first line (logging may be configured late)
    fields: dict[str, Any] | None = None

    def set_trace(self, trace: Trace | None) -> None:
        """Adopt `trace` unless the request already has one."""
        if self.trace is None and trace is not None:
            self.trace, self.fields = trace, None


_request: ContextVar[RequestLog | None] = ContextVar("worker_chart_export_request_log", default=None)


def begin_request(trace: Trace | None) -> tuple[RequestLog, Token[RequestLog | None]]:
    """Starts a request's log scope in this context; pass the token to `end_request`."""
    request = RequestLog(trace)
    return request, _request.set(request)


def end_request(token: Token[RequestLog | None]) -> None:
    _request.reset(token)


def current_request() -> RequestLog | None:
    return _request.get()


def _request_fields(_: Any, __: str, event_dict: EventDict) -> EventDict:
    request = _request.get()
    if request is not None:
        request.lines += 1
        if request.trace is not None:
            if request.fields is None:
                request.fields = trace_fields(request.trace, _trace_project)
            event_dict.update(request.fields)
    return event_dict


def payload_name(special_field: str) -> str:
    """Where a caller's value for a special field goes: `timestamp_`, `trace_`, ..."""
    return f"{special_field.removeprefix('logging.googleapis.com/')}_"


def _cloud_logging_shape(_: Any, method_name: str, event_dict: EventDict) -> EventDict:
    message = event_dict.pop("event", "")
    time = event_dict.pop("time")
    # only this processor and `_request_fields` write special fields: a caller's is payload
    for key in _SPECIAL_FIELDS.intersection(event_dict):
        event_dict[payload_name(key)] = event_dict.pop(key)
    labels = {name: str(event_dict[name]) for name in LABEL_FIELDS if event_dict.get(name) is not None}
    if labels:
        event_dict[LABELS_KEY] = labels
    # severity, message and time first: the line reads well in a terminal too
    return {
        "severity": _SEVERITY.get(method_name, "DEFAULT"),
        "message": message if isinstance(message, str) else str(message),
        "time": time,
        **event_dict,
    }


def _without_keys(_: Any, __: str, line: Any) -> str:
    """The rendered line (a str: JSONRenderer's), redacted of every form of every known key."""
    redaction = known_keys.redaction()
    if redaction.text(line) is line:
        return line
    # value by value, so the line stays one JSON object; then the line as a whole for a
    # find that only the rendering made (a run across two values)
    return redaction.text(json.dumps(redaction.value(json.loads(line)), default=str))


def configure_logging(
    *, service: str, env: str, stream: TextIO | None = None, project: str | None = None
) -> None:
    """Idempotent; `stream` lets tests capture the lines (default stdout, as Cloud Run reads).
    `project` names the traces' project (default: GOOGLE_CLOUD_PROJECT, else none)."""
    global _base_logger, _trace_project
    identity = {"service": service, "env": env}
    _trace_project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None

    def add_identity(_: Any, __: str, event_dict: EventDict) -> EventDict:
        # A processor, not a context variable: request threads (gunicorn) start with an
        # empty context, and every line must still say which service and env wrote it.
        for key, value in identity.items():
            event_dict.setdefault(key, value)
        return event_dict

    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_identity,
            # set before the request's trace fields, which are ours to write, are merged
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
            structlog.processors.format_exc_info,
            _cloud_logging_shape,
            _request_fields,
            structlog.processors.JSONRenderer(sort_keys=False, default=str),
            _without_keys,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )
    _base_logger = None


_base_logger: Any = None
_trace_project: str | None = None


def get_logger() -> Any:
    """The configured logger, built once per configuration: most events log one line, and
    assembling a logger from the configuration would cost as much as rendering it."""
    global _base_logger
    if _base_logger is None:
        _base_logger = structlog.get_logger().bind()
    return _base_logger


_configure_lock = threading.Lock()
_configure_checked = False


def configured_logger() -> Any:
    """`get_logger()`, configuring structlog on first use unless the host (the CLI, a test)
    already did: functions-framework can load our entry module without our CLI."""
    global _configure_checked
    if not _configure_checked:
        with _configure_lock:
            if not _configure_checked:
                if not structlog.is_configured():
                    from worker_chart_export.environment import log_identity

                    service, env = log_identity()
                    configure_logging(service=service, env=env)
                _configure_checked = True
    return get_logger()
