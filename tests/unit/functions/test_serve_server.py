"""run_server and the redaction of gunicorn's own error pages, in this process: the server
functions-framework would start is a recording stand-in, gunicorn's page is written to a
socket that keeps what it is sent. (The integration tests serve the real thing.)"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from functions_framework import _http
from gunicorn import util

from worker_chart_export import known_keys
from worker_chart_export.functions import serve
from worker_chart_export.functions.serve import listen_problem, run_server

KEY = "sk_serve_test_0123456789abcdefXYZ"  # a key the process holds


@dataclass
class RecordingServer:
    """What functions-framework's create_server was given, and where it was run."""

    app: Any
    options: dict[str, Any]
    ran_on: list[tuple[str, int]] = field(default_factory=list)

    def run(self, host: str, port: int) -> None:
        self.ran_on.append((host, port))


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch, served_main: None) -> Iterator[list[RecordingServer]]:
    made: list[RecordingServer] = []

    def create_server(app: Any, debug: bool, **options: Any) -> RecordingServer:
        made.append(RecordingServer(app, {"debug": debug, **options}))
        return made[-1]

    monkeypatch.setattr(_http, "create_server", create_server)
    monkeypatch.setattr(util, "write_error", util.write_error)  # put back whatever run_server wraps
    yield made


@pytest.fixture
def a_known_key() -> Iterator[str]:
    known_keys.learn([KEY])
    yield KEY
    known_keys.forget_all()


def test_the_server_serves_the_target_on_the_host_and_port_with_the_threads_asked(
    servers: list[RecordingServer],
) -> None:
    run_server(8089, "127.0.0.1", threads=3, target="advance_flow")
    [server] = servers
    assert server.ran_on == [("127.0.0.1", 8089)]
    assert server.options == {"debug": False, "threads": 3}
    assert server.app.name == "advance_flow"  # functions-framework names the app after its target
    assert server.app.extensions.get("worker_chart_export.request_logging") is True


def test_without_threads_functions_framework_chooses_them_and_the_worker_is_served_on_every_address(
    servers: list[RecordingServer],
) -> None:
    run_server(8090)
    [server] = servers
    assert server.ran_on == [("0.0.0.0", 8090)]
    assert server.options == {"debug": False}  # THREADS (or 4 per CPU): functions-framework's
    assert server.app.name == "on_flow_run_updated"


class KeptSocket:
    """A non-blocking socket (as gunicorn's write_nonblock sees it) that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent = b""

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.sent += data


def test_a_page_gunicorn_writes_itself_carries_no_key(
    servers: list[RecordingServer], a_known_key: str
) -> None:
    run_server(8091)
    sock = KeptSocket()
    util.write_error(sock, 400, "Bad Request", f"Invalid header: x-api-key {a_known_key}")
    page = sock.sent.decode()
    assert "400 Bad Request" in page and "Invalid header: x-api-key" in page
    assert a_known_key not in page


def test_the_page_is_wrapped_once_however_often_a_server_starts(servers: list[RecordingServer]) -> None:
    run_server(8092)
    wrapped = util.write_error
    assert getattr(wrapped, "redacted", False) is True
    run_server(8093)
    assert util.write_error is wrapped  # not a wrapper of the wrapper


def test_without_gunicorn_nothing_is_wrapped(
    servers: list[RecordingServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    original = util.write_error
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "gunicorn" else real_find_spec(name)
    )
    serve._redact_server_errors()
    assert util.write_error is original


# --- listen_problem: a mistake in --host/--port is one line, found by binding as gunicorn will


def test_a_free_port_has_no_problem() -> None:
    with socket.socket() as holder:  # a port the system just handed out, then let go
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    assert listen_problem("127.0.0.1", port) is None


def test_a_port_something_listens_on_is_in_use() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        problem = listen_problem("127.0.0.1", port)
    assert problem == f"127.0.0.1:{port} is in use: stop what listens there, or choose another port"


def test_an_address_of_another_machine_is_named() -> None:
    assert listen_problem("192.0.2.1", 8080) == "--host '192.0.2.1' is not an address of this machine"


def test_a_host_that_is_no_address_is_named() -> None:
    host = "a" * 64 + ".x"  # a label longer than DNS allows: refused before any lookup
    problem = listen_problem(host, 8080)
    assert problem is not None and problem.startswith(f"--host {host!r} is not an address (")


@pytest.mark.parametrize(
    ("refusal", "words"),
    [
        (OSError(errno.ENOBUFS, "No buffer space available"), "No buffer space available"),
        (OSError("the system gave no errno"), "the system gave no errno"),
    ],
    ids=["system-words", "no-errno"],
)
def test_any_other_refusal_is_named_in_the_systems_words(
    monkeypatch: pytest.MonkeyPatch, refusal: OSError, words: str
) -> None:
    """A refusal none of the known causes explain is quoted as the system words it (its
    strerror, not Python's "[Errno ...]" prefix), or as the error itself when it has none."""

    def refuse(self: socket.socket, address: Any) -> None:
        raise refusal

    monkeypatch.setattr(socket.socket, "bind", refuse)  # the kernel's answer, chosen
    assert listen_problem("127.0.0.1", 8080) == f"cannot listen on 127.0.0.1:8080: {words}"
