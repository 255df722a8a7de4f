"""`serve.run_server`: the production server (gunicorn via functions-framework) in a real
process, on 127.0.0.1, handling events concurrently."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path
from urllib import request

import pytest

from harness.logs import LogCapture
from worker_chart_export.functions.serve import create_function_app, main_source_path
from worker_chart_export.testing import build_document_event_data, document_resource_name

CONCURRENT_EVENTS = 4

# Serves the real function; each decode waits until every event is being handled at once,
# so events handled one after the other break the barrier (and decode fails) instead of
# merely taking longer: no clock in the assertion.
SLOW_SERVER = textwrap.dedent(
    f"""
    import sys, threading
    import worker_chart_export.functions.decoding.events as events

    decode = events.decode_event
    all_in = threading.Barrier({CONCURRENT_EVENTS}, timeout=30)

    def slow_decode(cloud_event):
        all_in.wait()
        return decode(cloud_event)

    events.decode_event = slow_decode
    from worker_chart_export.functions.serve import run_server
    run_server(int(sys.argv[1]), host="127.0.0.1", threads={CONCURRENT_EVENTS})
    """
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def stopped_log(self) -> str:
        """Its whole log, once it has stopped: every line written, none still on its way."""
        self.process.terminate()  # gunicorn's arbiter stops its worker on SIGTERM
        self.process.wait()  # pytest-timeout (pyproject) ends a stop that hangs
        return self.log_path.read_text()


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[Served]:
    port, log_path = free_port(), tmp_path / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", SLOW_SERVER, str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # until it listens or exits; a start that hangs is ended by pytest-timeout (pyproject)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                time.sleep(0.05)
        yield Served(port, server, log_path)
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=60)


def post_noop_event(port: int, event_id: str) -> int:
    name = document_resource_name("p", "flow_runs/RUN1")
    body = build_document_event_data(name, {"steps": {}}).SerializeToString()
    headers = {
        "ce-id": event_id,
        "ce-source": "//firestore.googleapis.com/test",
        "ce-specversion": "1.0",
        "ce-type": "google.cloud.firestore.document.v1.updated",
        "ce-subject": "documents/flow_runs/RUN1",
        "content-type": "application/protobuf",
    }
    reply = request.urlopen(
        request.Request(f"http://127.0.0.1:{port}/", data=body, headers=headers), timeout=30
    )
    with reply:
        return int(reply.status)


def test_events_are_handled_concurrently(slow_server: Served) -> None:
    with ThreadPoolExecutor(max_workers=CONCURRENT_EVENTS) as pool:
        statuses = list(
            pool.map(lambda i: post_noop_event(slow_server.port, f"evt-{i}"), range(CONCURRENT_EVENTS))
        )
    assert statuses == [200] * CONCURRENT_EVENTS
    text = slow_server.stopped_log()
    # serialized handling would have broken the barrier: "the decoder failed" lines instead
    assert text.count('"message": "event received: no READY CHART_EXPORT step"') == CONCURRENT_EVENTS, text


def test_the_app_serves_main_py_and_exposes_only_the_functions_folder() -> None:
    folder = main_source_path().parent
    before = list(sys.path)
    try:
        app = create_function_app()
        added = [entry for entry in sys.path if entry not in before]
    finally:
        sys.path[:] = before
    assert added in ([], [str(folder)])  # functions-framework adds the source's folder, once
    assert folder.name == "functions" and main_source_path().name == "main.py"
    # what that folder puts on sys.path must not shadow a module importable otherwise
    exposed = {p.stem for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    exposed.discard("__init__")
    assert exposed == {"main", "envelope", "serve", "decoding"}
    elsewhere = [entry for entry in sys.path if entry != str(folder)]
    shadowed = [n for n in exposed if n in sys.stdlib_module_names or PathFinder.find_spec(n, elsewhere)]
    assert shadowed == []
    assert app.test_client().get("/").status_code == 405  # CloudEvents are POSTed


def test_an_app_functions_framework_builds_itself_gets_the_request_logging(log_capture: LogCapture) -> None:
    """`functions-framework --target on_flow_run_updated --source .../main.py` (no serve.py):
    main.py installs the middleware and the error handler on the app that loads it."""
    import functions_framework

    before = list(sys.path)
    app = functions_framework.create_app(
        target="on_flow_run_updated", source=str(main_source_path()), signature_type="cloudevent"
    )
    sys.path[:] = before
    client = app.test_client()
    nested = b"[" * 100_000 + b"]" * 100_000
    response = client.post("/", data=nested, headers={"content-type": "application/cloudevents+json"})
    assert response.status_code == 400
    assert client.get("/").status_code == 405
    rejected, not_allowed = log_capture.lines()
    assert (rejected["severity"], rejected["httpStatus"]) == ("WARNING", 400)
    assert "RecursionError" in rejected["reason"] and "Traceback" not in log_capture.text
    assert (not_allowed["severity"], not_allowed["httpStatus"]) == ("WARNING", 405)


def test_an_http_entry_that_raises_is_a_500_with_one_error_line(log_capture: LogCapture) -> None:
    """What an HTTP entry (say a lease reaper) gets from `http_entry` and the middleware."""
    import flask

    from worker_chart_export.functions.envelope import http_entry
    from worker_chart_export.functions.serve import install_request_logging

    def reap(request: flask.Request) -> str:
        if request.args.get("fail"):
            raise RuntimeError("store unavailable")
        return "reaped 0"

    app = flask.Flask("reaper")
    app.add_url_rule("/", "reap", lambda: http_entry(reap)(flask.request), methods=["POST"])
    install_request_logging(app)
    install_request_logging(app)  # idempotent: one middleware, one line per request
    client = app.test_client()
    assert client.post("/").status_code == 200
    response = client.post("/?fail=1")
    assert response.status_code == 500
    assert "<p>event handling failed</p>" in response.text and "store unavailable" not in response.text
    answered, failed = log_capture.lines()
    assert (answered["severity"], answered["message"], answered["httpStatus"]) == (
        "INFO",
        "request answered",
        200,
    )
    assert (failed["severity"], failed["message"]) == ("ERROR", "event handling failed")
    assert "RuntimeError: store unavailable" in failed["exception"]
    assert (failed["reason"], failed["httpStatus"]) == ("RuntimeError: store unavailable", 500)
    assert (failed["httpMethod"], failed["httpPath"]) == ("POST", "/")  # what identifies the request


def test_a_streamed_answer_is_passed_on_as_it_comes_not_read_into_memory() -> None:
    """A body the view streams (a generator) reaches the client chunk by chunk: the redaction
    of answers reads whole bodies only, and leaves such a body to be sent as it is."""
    import flask

    from worker_chart_export.functions.serve import install_request_logging

    produced: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"first ", b"second"):
            produced.append(chunk)
            yield chunk

    app = flask.Flask("streamer")
    app.add_url_rule("/", "stream", lambda: flask.Response(chunks()))
    install_request_logging(app)
    response = app.test_client().get("/", buffered=False)
    # answered with the first chunk (werkzeug's client reads one to see the status), not all
    assert response.status_code == 200 and produced == [b"first "]
    assert response.get_data() == b"first second" and produced == [b"first ", b"second"]
