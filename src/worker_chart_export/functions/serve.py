"""Serve one function of `main` over HTTP the way Cloud Run's functions runtime does: the
worker `on_flow_run_updated` (default), `advance_flow`, or the reaper `reap_expired_leases`.

functions-framework 3.10 builds a Flask app and runs it under gunicorn on Linux (one worker
process, `gthread` worker with `$THREADS` threads, default 4 per CPU), so concurrent events
are handled concurrently; where gunicorn is unavailable it falls back to Flask's server.

`install_request_logging` puts three things around that app, so every request leaves at least
one structured log line, nothing answers with a plain-text traceback and no answer carries a
form of an API key the process holds:
- `RequestLogMiddleware` (WSGI): opens the request's log scope with its trace (`traceparent`,
  `X-Cloud-Trace-Context`, or the binary-mode CloudEvent's `ce-traceparent`) and, when
  nothing was logged by the time the answer is ready (a 405, functions-framework's own 400
  or 415), writes the one line saying what was answered;
- a Flask error handler: an exception raised before our function ran comes from decoding
  the request (the cloudevents SDK on deep JSON, bytes that are not UTF-8, a JSON array as
  a structured event): the request can never succeed, so it is answered 400 with one
  WARNING line. An exception our function let escape is a 500 (Eventarc redelivers) with
  one ERROR line;
- the redaction of every answer (`known_keys`, core/redaction.py): an error's description
  before werkzeug escapes it into HTML (ours quotes the exception, functions-framework's own
  400 quotes the whole request, headers and body), then every body Flask sends (the reaper's
  JSON too) as the last net. A body without a key costs one sieve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from worker_chart_export import known_keys, logs

FUNCTION_TARGET = "on_flow_run_updated"
SIGNATURE_TYPE = "cloudevent"
# Every function main.py serves, and how functions-framework must call it.
SIGNATURES: dict[str, str] = {
    FUNCTION_TARGET: SIGNATURE_TYPE,
    "advance_flow": "cloudevent",
    "reap_expired_leases": "http",
}
_INSTALLED = "worker_chart_export.request_logging"
_EXCERPT_CHARS = 300

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def main_source_path() -> Path:
    """The file functions-framework loads the function from (it wants a path, not a module)."""
    return Path(__file__).resolve().with_name("main.py")


def create_function_app(target: str = FUNCTION_TARGET, signature_type: str | None = None) -> Any:
    """The WSGI (Flask) app serving a function of main.py; also handy for `test_client()`."""
    import functions_framework

    # create_app appends the source's folder to sys.path, for a function's siblings: that
    # folder is `functions/`, whose modules no other import name can be mistaken for.
    # functions-framework ships no annotations: its calls are untyped
    app = functions_framework.create_app(  # type: ignore[no-untyped-call]
        target=target, source=str(main_source_path()), signature_type=signature_type or SIGNATURES[target]
    )
    install_request_logging(app)  # main.py did when it was loaded; this says so here too
    return app


def install_request_logging(app: Any) -> None:
    """Idempotent: wraps the Flask `app` with the middleware, the error handler and the
    redaction of every answer."""
    if app.extensions.get(_INSTALLED):
        return
    app.extensions[_INSTALLED] = True
    app.register_error_handler(Exception, _answer_exception)
    app.after_request(_redacted_answer)
    app.wsgi_app = RequestLogMiddleware(app.wsgi_app)


def _redacted_answer(response: Any) -> Any:
    """Flask's last step for every answer (an error handler's too): the body redacted."""
    if response.is_streamed or response.direct_passthrough:
        return response  # none of ours: a body that is a file or a generator is sent as it is
    body = response.get_data()
    redacted = known_keys.redaction().content(body)
    if redacted is not body:
        response.set_data(redacted)  # Content-Length follows
    return response


class RequestLogMiddleware:
    """One log scope per request, and a line for a request nothing else logged."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        get = environ.get
        trace = logs.first_trace(
            get("HTTP_TRACEPARENT"), get("HTTP_X_CLOUD_TRACE_CONTEXT"), get("HTTP_CE_TRACEPARENT")
        )
        request, token = logs.begin_request(trace)
        statuses: list[str] = []

        def capture_status(status: str, headers: Any, exc_info: Any = None) -> Any:
            statuses.append(status)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, capture_status)
        finally:
            if request.lines == 0:
                _log_answer(environ, statuses[-1] if statuses else "500 INTERNAL SERVER ERROR")
            logs.end_request(token)


def _log_answer(environ: dict[str, Any], status_line: str) -> None:
    number = status_line[:3]
    code = int(status_line.split(" ", 1)[0]) if number.isascii() and number.isdigit() else 500
    method = "info" if code < 400 else "warning" if code < 500 else "error"
    message = "request answered" if code < 400 else "request rejected"
    getattr(_logger(), method)(message, httpStatus=code, **_request_summary(environ))


def _answer_exception(exc: Exception) -> Any:
    """Flask's handler for any exception a view raised (HTTP errors pass through)."""
    from werkzeug.exceptions import BadRequest, HTTPException, InternalServerError

    redaction = known_keys.redaction()
    if isinstance(exc, HTTPException):
        if exc.description:  # functions-framework's 400 quotes the request: before HTML escaping
            exc.description = redaction.text(exc.description)
        return exc
    request = logs.current_request()
    reason = _excerpt(redaction.text(f"{type(exc).__name__}: {exc}"))
    from flask import request as flask_request

    summary = _request_summary(flask_request.environ)
    if request is not None and not request.entered:
        _logger().warning(
            "request rejected: not a decodable CloudEvent", reason=reason, httpStatus=400, **summary
        )
        return BadRequest(description=f"not a decodable CloudEvent: {reason}")
    # our function's entry logs what it lets escape; this is the net below it
    _logger().error("event handling failed", reason=reason, httpStatus=500, exc_info=exc, **summary)
    return InternalServerError(description="event handling failed")


def _request_summary(environ: dict[str, Any]) -> dict[str, Any]:
    """What identifies a request, each value cut short (all of it is untrusted input)."""
    summary = {
        "httpMethod": environ.get("REQUEST_METHOD"),
        "httpPath": environ.get("PATH_INFO"),
        "contentType": environ.get("CONTENT_TYPE"),
        "contentLength": environ.get("CONTENT_LENGTH"),
        "eventId": environ.get("HTTP_CE_ID"),
        "eventType": environ.get("HTTP_CE_TYPE"),
    }
    return {key: _excerpt(value) for key, value in summary.items() if value}


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT_CHARS else f"{text[:_EXCERPT_CHARS]}... ({len(text)} chars)"


def _logger() -> Any:
    return logs.configured_logger()


def run_server(
    port: int, host: str = "0.0.0.0", *, threads: int | None = None, target: str = FUNCTION_TARGET
) -> None:
    """Blocks serving on host:port until the process is stopped (SIGTERM/SIGINT).

    `threads` overrides functions-framework's default (`$THREADS`, else 4 per CPU).
    """
    from functions_framework._http import create_server

    _redact_server_errors()
    options: dict[str, Any] = {} if threads is None else {"threads": threads}
    server = create_server(create_function_app(target), debug=False, **options)  # type: ignore[no-untyped-call]
    server.run(host, port)


def _redact_server_errors() -> None:
    """gunicorn answers a request it cannot parse on its own, quoting what it refused (the
    request line, a header) in its error page: that page is redacted too, before gunicorn
    escapes it into HTML. Idempotent; the forked worker inherits it. Relies on
    `gunicorn.util.write_error` (tests/unit/test_private_apis.py)."""
    import importlib.util

    if importlib.util.find_spec("gunicorn") is None:
        return  # functions-framework serves with Flask's server: every answer is Flask's
    from gunicorn import util  # type: ignore[import-untyped]

    write_error: Any = util.write_error
    if getattr(write_error, "redacted", False):
        return

    def redacted_write_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
        write_error(sock, status_int, reason, known_keys.redaction().text(mesg))

    redacted_write_error.redacted = True  # type: ignore[attr-defined]
    util.write_error = redacted_write_error


def listen_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port, with what to do, found by binding as
    gunicorn will (SO_REUSEADDR: a port in TIME_WAIT is free); None when it can. Checked
    before serving: a mistake is one line instead of gunicorn's five retries and traceback."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        return f"--host {host!r} is not an address ({exc})"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            where = f"{host}:{port}"
            if exc.errno == errno.EADDRINUSE:
                return f"{where} is in use: stop what listens there, or choose another port"
            if exc.errno == errno.EACCES:
                return f"{where}: permission denied (ports below 1024 need privileges): choose another port"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"--host {host!r} is not an address of this machine"
            return f"cannot listen on {where}: {exc.strerror or exc}"
    return None
