"""The trigger router: the Firestore emulator sends every trigger's events to one
`--functions_emulator` host, at /functions/projects/<project>/triggers/<name>; the router
listens there and forwards each event, headers and body untouched, to the served process
of the function registered under <name>.

It also counts what it delivered per (trigger, document), which is how the stack and the
tests count function invocations without depending on any log line's wording.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TRIGGER_PATH = re.compile(r"^/functions/projects/[^/]+/triggers/(?P<name>[^/?]+)$")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
FORWARD_TIMEOUT_SECONDS = 600.0
# A function restarting (the crash demo) refuses connections for a moment: the router
# retries the connection for this long, standing in for Eventarc's redelivery.
CONNECT_RETRY_SECONDS = 15.0


@dataclass(frozen=True)
class Delivery:
    trigger: str
    subject: str  # ce-subject, e.g. documents/flow_runs/RUN1
    event_id: str
    status: int  # the function's answer; 502 when it could not be reached
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    body: bytes = field(default=b"", repr=False)  # as the emulator sent it (base64 protobuf text)


@dataclass
class TriggerRouter:
    """`routes`: trigger name -> host:port of the served function."""

    routes: dict[str, str] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self, port: int, host: str = "127.0.0.1") -> TriggerRouter:
        server = ThreadingHTTPServer((host, port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="trigger-router", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "router not started"
        return int(self._server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def route(self, trigger: str, host_port: str) -> None:
        with self._lock:
            self.routes[trigger] = host_port

    def record(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def delivered(self, trigger: str, subject: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.trigger == trigger and d.subject == subject]

    def counts(self, subject: str | None = None) -> Counter[str]:
        """Invocations per trigger, for one document (`documents/flow_runs/<runId>`) or all."""
        with self._lock:
            return Counter(d.trigger for d in self.deliveries if subject is None or d.subject == subject)


def _handler(router: TriggerRouter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            match = TRIGGER_PATH.match(self.path)
            target = router.routes.get(match.group("name")) if match else None
            if match is None or target is None:
                self._reply(404, b"no function registered for this path\n")
                return
            status, payload = _forward(target, self.path, dict(self.headers.items()), body)
            router.record(
                Delivery(
                    match.group("name"),
                    self.headers.get("ce-subject", ""),
                    self.headers.get("ce-id", ""),
                    status,
                    dict(self.headers.items()),
                    body,
                )
            )
            self._reply(status, payload)

        def _reply(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # the live view owns the terminal
            pass

    return Handler


def _forward(target: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    host, _, port = target.rpartition(":")
    forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
    deadline = time.monotonic() + CONNECT_RETRY_SECONDS
    while True:
        connection = HTTPConnection(host, int(port), timeout=FORWARD_TIMEOUT_SECONDS)
        try:
            connection.request("POST", path, body=body, headers=forwarded)
            response = connection.getresponse()
            return response.status, response.read()
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                return 502, f"function at {target} unreachable\n".encode()
            time.sleep(0.2)
        except OSError as exc:  # reset mid-request: the function died while handling it
            return 502, f"function at {target} failed: {exc}\n".encode()
        finally:
            connection.close()
