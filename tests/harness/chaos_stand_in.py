"""The CHART-IMG stand-in with the bad luck of issue 27 switched on and off while it serves.

`ChaosChartImgServer` is `ChartImgServer` (tests/harness/chart_img_server.py: keys, pacing,
quota, the documented answers) plus, each a small control:

- `refuse(window)` / `accept()`: the listening socket is closed, so a connection is refused
  (ECONNREFUSED: the call provably never left), and idle keep-alive connections are closed so
  a client's pool cannot slip past; `accept()` listens again on the same port;
- `throttle_window(window)`: the base stand-in's whole-service throttle window (`throttle()`,
  issue 26), named: every request hears 429 "Too Many Requests" before it is admitted (the
  gateway throttling the whole service: no key is to blame, no unit is spent);
- `fault(status, window, delay)`: every admitted request (a unit spent) answered 500
  "Something Went Wrong" or, after `delay`, 504 "External Request Timeout" (as CHART-IMG's
  gateway may, the 504 counts a unit); `fault(None, window)` ends that burst;
- `exhaust(account, window)`: another client spends the key's day: "Limit Exceeded" from now;
- `refuse_template(template, window)`: the base stand-in's request-caused 401
  (`refuse_request`, issue 26), named: that template's requests draw 401 "Invalid Request";
- `register_template(id, request, version)`: an edited template's request recognised as its
  id, and as that version of it (the templates of the folder are version "initial").

Every 200 carries a PNG whose tEXt chunk `request-sha256` is the digest of the body as
received (`request_sha256`), so a manifest's PNG can be traced to the request it was drawn
for. Every request is logged with its wall-clock arrival, that digest, the template and the
version of it its body is, and the window whose answer it got (`chaos`: None when the
stand-in answered as CHART-IMG would on a good day), never the key.

The stand-in keeps its own books per key (`account_usage`): the units it charged us (`used`
less what another client spent: `exhaust`), and the moment the key's day was used up, by our
calls or another client's (`exhausted_at`, wall clock). What spends a unit is the base's
`charges` ("admitted": past key, pace and quota; no 429 spends one).

Run as a process (`serve_chaos_from_stdin`, started by benchmarks/chaos/stand_in.py), it
prints the chart URL, then the admin URL (a second port, still answering while the chart port
refuses): `POST /admin/chaos` with {"action": ..., ...}, `GET /admin/requests`,
`GET /admin/accounts`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.chart_img_server import (
    ChartImgServer,
    RecordedRequest,
    _Account,
    _canonical,
    _Handler,
    _json_reply,
    _Reply,
    _Server,
    documented_message,
    parse_account_spec,
    register_templates_from,
)
from harness.naming_contract import request_sha256
from harness.png_digest import png_with_digest

INITIAL = "initial"  # the version of a template registered from the folder, before any edit


class _Connections:
    """The chart port's open connections, and which are between requests (idle). A request
    whose bytes arrive on an idle connection in the instant it is shut is lost unanswered
    (the client sees the connection closed, not refused): the one race of a refusal window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[socket.socket, bool] = {}

    def mark(self, connection: socket.socket, idle: bool) -> None:
        with self._lock:
            self._idle[connection] = idle

    def forget(self, connection: socket.socket) -> None:
        with self._lock:
            self._idle.pop(connection, None)

    def close_idle(self) -> None:
        """Shut the idle ones: a client's pool sees them closed and must connect anew."""
        with self._lock:
            idle = [c for c, is_idle in self._idle.items() if is_idle]
        for connection in idle:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _ChaosHandler(_Handler):
    def setup(self) -> None:
        super().setup()
        self.server.connections.mark(self.connection, True)  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        connections: _Connections = self.server.connections  # type: ignore[attr-defined]
        connections.mark(self.connection, False)
        try:
            super().do_POST()
        finally:
            connections.mark(self.connection, True)
            if self.server.owner.refusing:  # type: ignore[attr-defined]
                self.close_connection = True  # answered; the next request must connect again

    def finish(self) -> None:
        self.server.connections.forget(self.connection)  # type: ignore[attr-defined]
        super().finish()


@dataclasses.dataclass
class ChaosState:
    """Which windows are open; each value is the window's name, tagged on what it answers."""

    refusing: str | None = None
    throttle: str | None = None
    faults: dict[str, tuple[int, float]] = dataclasses.field(
        default_factory=dict
    )  # window -> (status, delay)
    exhausted: dict[str, str] = dataclasses.field(default_factory=dict)  # account id -> window
    refused_templates: dict[str, str] = dataclasses.field(default_factory=dict)  # template -> window


class ChaosChartImgServer(ChartImgServer):
    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self._httpd.server_close()  # the plain server never served: ours tracks connections
        self.connections = _Connections()
        self.chaos = ChaosState()
        self._extras: dict[int, dict[str, Any]] = {}  # id(record) -> wall, digest, version, chaos
        self._versions: dict[str, str] = {}  # a template body's shape -> which version it is
        self._other_client: dict[str, int] = {}  # account id -> units another client spent
        self._exhausted_at: dict[str, float] = {}  # account id -> when its day was used up (wall)
        self._current = threading.local()
        self._listen(port)

    def _listen(self, port: int) -> None:
        self._httpd = _Server(("127.0.0.1", port), _ChaosHandler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._httpd.connections = self.connections  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def refusing(self) -> bool:
        return self.chaos.refusing is not None

    # --- the controls ---

    def refuse(self, window: str) -> None:
        with self._lock:
            if self.chaos.refusing is not None:
                return
            self.chaos.refusing = window
        self._httpd.shutdown()
        self._httpd.server_close()  # from here a connect is refused
        self._thread.join(timeout=5)
        self.connections.close_idle()

    def accept(self) -> None:
        with self._lock:
            if self.chaos.refusing is None:
                return
        self._listen(int(self._httpd.server_address[1]))
        self._thread.start()
        with self._lock:
            self.chaos.refusing = None

    def throttle_window(self, window: str | None) -> None:
        """Open the whole-service throttle (the base's `throttle()`) as `window`; None ends it."""
        with self._lock:
            self.chaos.throttle = window
        if window is None:
            self.end_throttle()
        else:
            self.throttle()

    def fault(self, status: int | None, window: str, delay: float = 0.0) -> None:
        """Open a burst of `status` answers (the newest open burst answers), or close it (None)."""
        with self._lock:
            if status is None:
                self.chaos.faults.pop(window, None)
            else:
                self.chaos.faults[window] = (status, delay)

    def exhaust(self, account_id: str, window: str) -> None:
        """Another client spends the key's day: its quota is used up from now."""
        with self._lock:
            for account in self._accounts_by_key.values():
                if account.account_id == account_id:
                    if account.daily_quota is None:
                        account.daily_quota = account.used
                    spent = max(0, account.daily_quota - account.used)
                    self._other_client[account_id] = self._other_client.get(account_id, 0) + spent
                    account.used += spent
                    self._exhausted_at.setdefault(account_id, time.time())
            self.chaos.exhausted[account_id] = window

    def register_template(self, template_id: str, request: Mapping[str, Any], version: str = INITIAL) -> None:
        """The base's recognition of a template's body, and which version of it the body is."""
        super().register_template(template_id, request)
        with self._lock:
            self._versions[_canonical(request)] = version

    def refuse_template(self, template_id: str, window: str) -> None:
        """The base's request-caused 401 for this template, its answers tagged `window`."""
        self.refuse_request(template=template_id)
        with self._lock:
            self.chaos.refused_templates[template_id] = window

    # --- what happened ---

    def request_log(self) -> list[dict[str, Any]]:
        with self._lock:
            records = list(self._requests)
            return [dataclasses.asdict(r) | self._extras[id(r)] for r in records]

    def account_usage(self) -> list[dict[str, Any]]:
        """Each key's books: `used` (every unit spent, ours and another client's), `quota`,
        `charged` (the units our calls spent) and `exhausted_at` (None: units left)."""
        with self._lock:
            return [
                {
                    "account_id": a.account_id,
                    "used": a.used,
                    "quota": a.daily_quota,
                    "charged": a.used - self._other_client.get(a.account_id, 0),
                    "exhausted_at": self._exhausted_at.get(a.account_id),
                }
                for a in self._accounts_by_key.values()
            ]

    def stop(self) -> None:
        self.accept()  # serving again, so the plain stop finds a running server to shut
        super().stop()

    # --- answering (the base's order, with the windows put in) ---

    def _record(
        self,
        account: _Account | None,
        arrived: float,
        body: Mapping[str, Any] | None,
        defaulted: tuple[str, ...],
    ) -> RecordedRequest:
        record = super()._record(account, arrived, body, defaulted)
        digest = request_sha256(body) if body is not None else None
        version = self._versions.get(_canonical(body)) if body is not None else None
        throttled = self.chaos.throttle if self._throttle is not None else None  # answered before admission
        self._extras[id(record)] = {
            "wall": time.time(),
            "digest": digest,
            "template_version": version,
            "chaos": throttled,
        }
        self._current.record = record
        return record

    def _tag(self, window: str) -> None:
        """Under the lock: the current request was answered by `window`."""
        self._extras[id(self._current.record)]["chaos"] = window

    def _admit(self, account: _Account | None, now: float) -> _Reply | None:
        refusal = super()._admit(account, now)
        if account is not None and account.daily_quota is not None and account.used >= account.daily_quota:
            self._exhausted_at.setdefault(account.account_id, time.time())  # our calls used the day up
        window = self.chaos.exhausted.get(account.account_id) if account is not None else None
        if window is not None and refusal is not None and b"Limit Exceeded" in refusal.body:
            self._tag(window)
        return refusal

    def _answer(self, record: RecordedRequest, key: str, body: Mapping[str, Any]) -> _Reply:
        with self._lock:
            refused_by = self.chaos.refused_templates.get(record.template or "")
            fault = next(reversed(self.chaos.faults.items()), None)
            if refused_by is not None:
                self._tag(refused_by)  # the base's script answers it (refuse_request)
            elif fault is not None:
                self._tag(fault[0])
        if refused_by is None and fault is not None:
            status, delay = fault[1]
            self._stopping.wait(delay)
            return _json_reply(status, documented_message(status, _FAULT_WORDS.get(status)))
        reply = super()._answer(record, key, body)
        if reply.status == 200 and reply.content_type == "image/png":
            with self._lock:
                digest = self._extras[id(record)]["digest"]
            return _Reply(200, png_with_digest(digest), "image/png")
        return reply


_FAULT_WORDS = {500: "Something Went Wrong", 504: "External Request Timeout"}


def apply_control(server: ChaosChartImgServer, command: Mapping[str, Any]) -> None:
    """One `POST /admin/chaos` body, e.g. {"action": "fault", "status": 504, "window": "fault_504#1"}."""
    action, window = command.get("action"), str(command.get("window", ""))
    if action == "refuse":
        server.refuse(window)
    elif action == "accept":
        server.accept()
    elif action == "throttle":
        server.throttle_window(command.get("window"))
    elif action == "fault":
        server.fault(command.get("status"), window, float(command.get("delay", 0.0)))
    elif action == "exhaust":
        server.exhaust(str(command["account"]), window)
    elif action == "refuse_template":
        server.refuse_template(str(command["template"]), window)
    elif action == "register_template":
        server.register_template(
            str(command["template"]), command["request"], str(command.get("version", INITIAL))
        )
    else:
        raise ValueError(f"unknown chaos action {action!r}")


def _admin_handler(server: ChaosChartImgServer) -> type[BaseHTTPRequestHandler]:
    class Admin(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            views = {"/admin/requests": server.request_log, "/admin/accounts": server.account_usage}
            view = views.get(self.path)
            self._send(200, view()) if view else self._send(404, {"message": "Not Found"})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                apply_control(server, json.loads(raw))
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"message": str(exc)})
                return
            self._send(200, {"ok": True})

        def _send(self, status: int, value: Any) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Admin


def serve_chaos_from_stdin(argv: list[str] | None = None) -> None:
    """`python tests/harness/chaos_stand_in.py --latency 0.2 --account ID=KEY[:RATE:BURST[:QUOTA]]
    ... [--templates-dir DIR] [--admin-port PORT]`: prints the chart URL and the admin URL,
    serves until stdin closes. The latency applies to every key's 200s."""
    import argparse

    parser = argparse.ArgumentParser(description=serve_chaos_from_stdin.__doc__)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--account", action="append", default=[])
    parser.add_argument("--templates-dir", action="append", default=[])
    parser.add_argument("--admin-port", type=int, default=0, help="the admin port (0: any free one)")
    args = parser.parse_args(argv)
    server = ChaosChartImgServer()
    for spec in args.account:
        account_id, key, rate, burst, quota = parse_account_spec(spec)
        server.add_account(account_id, key=key, rate=rate, burst=burst, daily_quota=quota)
        if args.latency:
            server.script(key=key, latency=args.latency)
    for folder in args.templates_dir:
        register_templates_from(server, Path(folder))
    server.start()
    admin = ThreadingHTTPServer(("127.0.0.1", args.admin_port), _admin_handler(server))
    admin.daemon_threads = True
    threading.Thread(target=admin.serve_forever, args=(0.05,), daemon=True).start()
    print(server.base_url, flush=True)
    print(f"http://127.0.0.1:{admin.server_address[1]}", flush=True)
    sys.stdin.read()
    admin.shutdown()
    server.stop()


if __name__ == "__main__":
    serve_chaos_from_stdin()
