"""What every function of main.py shares, its envelope: the event decoded (poison for what
never decodes), the request's log scope and trace, the poison and crash answers
(`cloud_event_entry`, `http_entry`), the received event's attributes, and serve.py's request
logging given to an app that hosts main.py itself. main.py holds the functions only.

On every event's path, no-ops included: it imports no cloud client and no pydantic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from worker_chart_export import logs
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.exceptions import DecoderDefect, PoisonEvent
from worker_chart_export.functions.decoding import events

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

    from worker_chart_export.functions.decoding import versions

CloudEventHandler = Callable[["CloudEvent", Any], None]
Decoded = TypeVar("Decoded")


def decode_flow_run_event(cloud_event: CloudEvent) -> events.DecodedEvent:
    """`events.decode_event`; raises PoisonEvent (or DecoderDefect) for what never decodes."""
    return _decoded(events.decode_event, cloud_event)


def decode_version_event(cloud_event: CloudEvent) -> versions.DocumentVersion:
    """`versions.decode_document_version`; raises PoisonEvent (or DecoderDefect) likewise.
    Imported here, on first use: the worker's no-op path never decodes a whole version."""
    from worker_chart_export.functions.decoding import versions

    return _decoded(versions.decode_document_version, cloud_event)


def _decoded(decode: Callable[[CloudEvent], Decoded], cloud_event: CloudEvent) -> Decoded:
    try:
        return decode(cloud_event)
    except PoisonEvent:
        raise
    except Exception as exc:
        raise DecoderDefect(f"{type(exc).__name__}: {exc}") from exc


def cloud_event_entry(handler: CloudEventHandler) -> Callable[[CloudEvent], None]:
    """What every CloudEvent entry point shares; `handler(cloud_event, log)` does the rest.

    - the request's log scope: joins serve.py's (marking that our code now runs, so what
      fails from here on is not the request's fault) or opens one when called without it;
      the event's `traceparent` extension is the trace when the request carried none;
    - `log`: the configured logger, bound to the event's id;
    - a PoisonEvent is acknowledged (HTTP 200) with one WARNING line carrying the received
      event's attributes (a DecoderDefect with an ERROR line): redelivering cannot help;
    - an HTTPException passes through (the handler logged it: a deliberate 500 asks
      Eventarc to redeliver); any other exception is logged as an ERROR with its traceback
      and answered 500 without one.
    """

    @functools.wraps(handler)
    def entry(cloud_event: CloudEvent) -> None:
        token = _enter(logs.parse_traceparent(cloud_event.get("traceparent")))
        try:
            log = logs.configured_logger().bind(eventId=cloud_event.get("id"))
            try:
                handler(cloud_event, log)
            except PoisonEvent as poison:
                _log_poison(log, poison, cloud_event)
            except Exception as exc:
                from werkzeug.exceptions import HTTPException, InternalServerError

                if isinstance(exc, HTTPException):
                    raise
                log.error("event handling failed", reason=f"{type(exc).__name__}: {exc}", exc_info=True)
                raise InternalServerError(description="event handling failed") from exc
        finally:
            if token is not None:
                logs.end_request(token)

    return entry


def http_entry(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """For an HTTP entry (`@functions_framework.http` over this): what it raises is our
    fault, so serve.py answers it 500 with one ERROR line (not 400, as for a request that
    failed before any of our code ran)."""

    @functools.wraps(handler)
    def entry(request: Any) -> Any:
        token = _enter(None)
        try:
            return handler(request)
        finally:
            if token is not None:
                logs.end_request(token)

    return entry


def _enter(event_trace: logs.Trace | None) -> Any:
    """Joins the request's log scope (serve.py's middleware opened it) or opens one when
    called without it (directly, or hosted elsewhere), and marks that our code now runs.
    Returns the token to pass to `logs.end_request` when it opened one, else None."""
    request, token = logs.current_request(), None
    if request is None:
        request, token = logs.begin_request(event_trace)
    else:
        request.set_trace(event_trace)
    request.entered = True
    return token


def _log_poison(log: Any, poison: PoisonEvent, cloud_event: CloudEvent) -> None:
    # Contract §10's "received event" attributes: the only line such an event leaves.
    received = received_attributes(cloud_event)
    if isinstance(poison, DecoderDefect):
        log.error(
            "event ignored: the decoder failed",
            reason=poison.reason,
            code=ErrorCode.FLOW_RUN_INVALID.value,
            exc_info=poison.__cause__,
            **received,
        )
        return
    # Acknowledged on purpose: a redelivery would fail the same way, forever.
    log.warning(
        "event ignored: not a decodable flow_run event",
        reason=poison.reason,
        code=ErrorCode.FLOW_RUN_INVALID.value,
        **received,
    )


def received_attributes(cloud_event: CloudEvent) -> dict[str, Any]:
    return {
        "eventType": cloud_event.get("type"),
        "eventSource": cloud_event.get("source"),
        "eventSubject": cloud_event.get("subject"),
        "eventTime": cloud_event.get("time"),
        "payloadSize": _payload_size(cloud_event.data),
    }


def _payload_size(data: object) -> int | None:
    return len(data) if isinstance(data, str | bytes | bytearray) else None


def install_on_hosting_app() -> None:
    """functions-framework executes this module inside the context of the Flask app it is
    building (`functions-framework --target ...`, Cloud Functions' runtime): give that app
    serve.py's request logging too. Imported any other way, this does nothing."""
    import flask

    if flask.has_app_context():
        from worker_chart_export.functions.serve import install_request_logging

        install_request_logging(flask.current_app)
