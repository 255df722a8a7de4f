"""A local stand-in for CHART-IMG's `POST /v2/tradingview/advanced-chart` and its Shared Layout
`POST /v2/tradingview/layout-chart/<LAYOUT_ID>` (docs/design.md, "How it is tested"; the
answers: "CHART-IMG answers", "Layouts").

It answers the way the real service documents (doc.chart-img.com: Snapshot v2 Advanced Chart,
Request Limit, Errors / API v2; the lists in contracts/chart-img/, read through
worker_chart_export.bundled.chart_img_docs), on 127.0.0.1 only:
- `x-api-key` must be a configured key: else 403 {"message": "Forbidden"};
- per key: a token-bucket rate limit (429 "Too Many Requests" past it) and a daily quota
  (429 "Limit Exceeded" once used up);
- the body is optional: a missing body, `symbol` or `interval` gets the documented default
  (BINANCE:BTCUSDT, 1D; RecordedRequest.defaulted names what was filled in); a body that is
  not JSON, or sent as another content type, gets 400 {"message": "Bad Request"} (the status
  table's 400 row; the docs show no 400 body, so its wording is the stand-in's); JSON that is
  not an object gets 422 {"message": "Invalid Request"};
- a symbol that is not a non-empty string, or an interval outside the documented list, gets
  the documented 422 array (`must be a valid tradingview EXCHANGE:SYMBOL`, `must be a
  supported interval`); configured bad symbols get 422 {"message": "Invalid Symbol"};
- per key's plan: width/height within 400x300 .. the plan's maximum (403 "Exceed Max Usage
  Resolution Limit (800x600)" above it; below the minimum a 422 array whose `msg`, "must be at
  least 400", is the stand-in's wording: the docs give the minimum, not that message) and
  studies + drawings within the plan's parameter limit (403 "Exceed Max Usage Parameter
  Limit (3)");
- scripted behaviours per symbol, template or key: latency (optionally cut short once a
  given number of calls are in flight at once), hang, N x 500 then success, a fixed error
  (e.g. 401 "Invalid Request", 409 "Session Disconnected", 504 "External Request Timeout":
  a scripted status without a message gets the documented one; a message the docs do not
  show is refused unless `undocumented=True`; `empty_body=True` sends none at all, and
  `retry_after` a Retry-After header, which the docs never show), or a 200 that is not a PNG;
- a careless provider: `echo_key=("url_quote", ...)` writes the request's own key (and the
  values of the TradingView session headers it carried) into the scripted error's body in
  each of those forms (`secret_scan.key_forms`' names), the key's first form in its message,
  every one in an `errors` entry, a JSON-escaped form escaped in the bytes;
- otherwise 200 with a small real PNG.

The Shared Layout (contracts/chart-img/layout_bounds.json), after key, pace and quota:
- `add_layout(id, private=..., sessions=..., forbidden=...)` makes a layout known; any other id
  gets 404 {"message": "Not Found"} (the docs give the status's type, "Not Found", no body);
- `add_session(name)` makes a TradingView session (its two values, returned) one the stand-in
  accepts; `expire_session(name)` ends it, as a logout does. Session headers that match no
  live session get 409 {"message": "Session Disconnected"} (the docs' "session disconnect ...
  use the current login sessionId");
- a private layout answers 403 {"message": "Layout Forbidden"} unless both session headers
  carry a live session it lists; a `forbidden` layout always does (the docs' 403 example);
- its body: symbol and interval only override the layout's (no default is filled in), width
  and height as for the Advanced Chart; a `script(layout=...)` answers it slower (a latency
  released by the test's own event) or otherwise.
Each request records its endpoint, its layout id, which session its headers carried (the
session's name, "unknown", or None) and the names of the session headers it had: never a
value.

Two answers that are nobody's key's fault, for the tests of who is blamed (issue 26):
- `throttle()` ... `end_throttle()`: a whole-service throttle window: every request, whatever
  its key, is answered 429 "Too Many Requests" (an API gateway throttling a stage or region
  answers so before it looks at the key), optionally with a Retry-After; no unit is spent;
- `refuse_request(symbol=..., template=...)`: that request is answered 401 "Invalid Request"
  (the docs' 401 example) on every key, after key, pace and quota: the request is refused,
  not the key.

When a request counts against the daily quota, and in which order CHART-IMG checks key,
pace, quota and body, the docs do not say: they give the daily maximum per plan and a 429
"Exceed the usage limit or the rate limit", nothing more. The stand-in's order is its own
choice: key, pace, quota, then the body, then the scripted answer. `charges` chooses what
spends a unit: "admitted" (the default, the cautious reading: every request past key, pace and
quota, whatever its answer) or "rendered" (only a 200 image). Its wordings "Forbidden", "Too
Many Requests", "Limit Exceeded" and "Endpoint request timed out" are AWS API Gateway's own
answers, whose usage plans count a request before the service behind it sees the body; that
hints at "admitted" and proves nothing.

Every request is recorded (account id, never the key; arrival and answer times; symbol;
template; status) so tests can count calls, check rates and see how many were in flight.
A template is recognised by its request body: `register_template(id, request)` teaches the
server what that template sends.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest

from harness.naming_contract import request_sha256
from worker_chart_export import testing
from worker_chart_export.bundled import chart_img_docs
from worker_chart_export.core.chart_img.plans import Plan, plan_named
from worker_chart_export.core.naming import fixture_key
from worker_chart_export.core.types import ChartCall

PATH = "/v2/tradingview/advanced-chart"
LAYOUT_PATH = "/v2/tradingview/layout-chart/"  # + <LAYOUT_ID>
SESSION_HEADERS = ("tradingview-session-id", "tradingview-session-id-sign")
ADMIN_REQUESTS_PATH = "/admin/requests"
MARKET = ("symbol", "interval")  # optional in the body: CHART-IMG has a default for each
BAD_SYMBOL = "must be a valid tradingview EXCHANGE:SYMBOL"  # the documented 422 array msgs
BAD_INTERVAL = "must be a supported interval"
Charges = Literal["admitted", "rendered"]


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def tiny_png(width: int = 4, height: int = 3, rgb: tuple[int, int, int] = (32, 96, 160)) -> bytes:
    """A valid RGB PNG of one colour, without pillow."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows))
        + _png_chunk(b"IEND", b"")
    )


PNG = tiny_png()


def new_key() -> str:
    """Looks like a real secret, so a leak scan over logs and failures means something."""
    return "test-key-" + secrets.token_hex(16)


@dataclass
class Script:
    """What the server does for requests that match a symbol or a template."""

    latency: float = 0.0  # seconds before answering
    # with latency: answer as soon as this many calls have been in flight at once (the
    # server's peak), or when latency passes: a capacity test need not wait on the clock
    hold_until_in_flight: int = 0
    # with latency: answer as soon as the test sets this (or when latency passes): the test
    # decides, by an event of its own, when the answer leaves
    release: threading.Event | None = None
    hang: float = 0.0  # seconds to stall without answering (longer than the client timeout)
    fail_times: int = 0  # answer fail_status this many times, then behave normally
    fail_status: int = 500
    fail_message: str | None = None  # None: the documented one ("Something Went Wrong")
    status: int | None = None  # always this error, e.g. 401, 403, 409, 504
    message: str | None = None  # None: the documented one, e.g. 409 "Session Disconnected"
    non_png: bool = False  # 200 with an HTML page
    undocumented: bool = False  # allow messages the docs do not show (an unknown answer)
    empty_body: bool = False  # the scripted error (status, or fail_status) with no body at all
    retry_after: str | None = None  # a Retry-After header on the scripted error (the docs show none)
    # the request's key echoed in the scripted error's body in these forms (secret_scan.key_forms)
    echo_key: tuple[str, ...] = ()
    failed: int = 0

    def __post_init__(self) -> None:
        self.fail_message = documented_message(self.fail_status, self.fail_message, self.undocumented)
        if self.status is not None:
            self.message = documented_message(self.status, self.message, self.undocumented)


def documented_message(status: int, message: str | None, undocumented: bool = False) -> str:
    """The `{"message": ...}` CHART-IMG documents for `status` (its first example when none is
    given); a wording the docs do not show only with `undocumented`."""
    shown = chart_img_docs.errors().messages(status)
    if message is None:
        examples = [b["message"] for b in chart_img_docs.errors().examples.get(status, ()) if "message" in b]
        if not examples:
            raise ValueError(f"the docs show no message for HTTP {status}: script one with message=")
        return str(examples[0])
    if message not in shown and not undocumented:
        raise ValueError(
            f"HTTP {status} {message!r} is not a documented API v2 answer ({sorted(shown)}); "
            "pass undocumented=True to script one on purpose"
        )
    return message


@dataclass
class _Account:
    account_id: str
    daily_quota: int | None
    rate: float | None
    burst: int
    plan: Plan
    used: int = 0
    tokens: float = 0.0
    updated: float = 0.0
    in_flight: int = 0
    max_in_flight: int = 0


@dataclass
class RecordedRequest:
    account_id: str | None
    arrived: float  # time.monotonic() when the request line was read
    symbol: str | None
    interval: str | None
    template: str | None
    defaulted: tuple[str, ...] = ()  # body fields the documented defaults filled in
    status: int | None = None  # None while still being answered
    message: str | None = None
    answered: float | None = None  # time.monotonic() when the answer was ready
    # requestDigest (naming contract) of the body exactly as received; None: unreadable
    received_digest: str | None = None
    endpoint: str = "advanced-chart"  # or "layout-chart"
    layout_id: str | None = None
    session: str | None = None  # the session its headers carried, by name ("unknown": none live)
    session_headers: tuple[str, ...] = ()  # the tradingview-session-* headers it had (names)


@dataclass(frozen=True)
class _Layout:
    private: bool = False
    sessions: frozenset[str] = frozenset()  # the sessions that reach it when private
    forbidden: bool = False  # "Layout Forbidden" whatever is sent


@dataclass
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def _json_reply(status: int, message: str) -> _Reply:
    return _Reply(status, json.dumps({"message": message}).encode())


def _validation_reply(*problems: tuple[str, Any, str]) -> _Reply:
    """422 as an array of {value, msg, param, location}, as API v2 sends body errors."""
    errors = [{"value": v, "msg": m, "param": p, "location": "body"} for p, v, m in problems]
    return _Reply(422, json.dumps(errors).encode())


def _canonical(request: Mapping[str, Any], layout_id: str | None = None) -> str:
    """What recognises a template's request: its body but the market (and its layout)."""
    shape = {k: v for k, v in request.items() if k not in MARKET}
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"))
    return text if layout_id is None else f"layout {layout_id} {text}"


def _layout_of(path: str) -> str | None:
    """The LAYOUT_ID of a Shared Layout path, else None."""
    layout_id = path.removeprefix(LAYOUT_PATH)
    return layout_id if layout_id != path and layout_id.isalnum() and layout_id.isascii() else None


def _read_body(headers: Mapping[str, str], raw: bytes) -> tuple[dict[str, Any], _Reply | None]:
    """The JSON object sent ({} for no body), or the documented refusal of what was sent."""
    if not raw.strip():
        return {}, None  # "The default values will be used ... if no request body is provided."
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type != "application/json":
            raise ValueError(content_type)
        body = json.loads(raw)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {}, _json_reply(400, "Bad Request")
    if not isinstance(body, dict):
        return {}, _json_reply(422, "Invalid Request")
    return body, None


def _with_defaults(body: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The body as CHART-IMG reads it: a missing symbol or interval gets its documented default."""
    documented = chart_img_docs.request_bounds().body
    missing = tuple(name for name in MARKET if name not in body)
    return {**body, **{name: documented[name].default for name in missing}}, missing


def _market_problems(body: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    symbol, interval = body["symbol"], body["interval"]
    problems = []
    if not isinstance(symbol, str) or not symbol.strip():
        problems.append(("symbol", symbol, BAD_SYMBOL))
    if interval not in chart_img_docs.intervals().values:
        problems.append(("interval", interval, BAD_INTERVAL))
    return problems


def _number(value: Any) -> bool:
    """A JSON number as CHART-IMG reads it: 800 and 800.0 are the same number."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class ChartImgServer:
    def __init__(self, *, refusing_connections: bool = False) -> None:
        """`refusing_connections`: the port is taken (bound) but not listened on, so every
        connection to it is refused, as an unreachable CHART-IMG's would be, until
        `accept_connections()`; the base URL stays the same."""
        self._lock = threading.Lock()
        self._in_flight_changed = threading.Condition(self._lock)
        self._in_flight = 0  # admitted calls being answered, every key together
        self._peak_in_flight = 0
        self._stopping = threading.Event()
        self._throttle: _Reply | None = None  # set: a whole-service throttle window is open
        self._accounts_by_key: dict[str, _Account] = {}
        self._templates: dict[str, str] = {}
        self._scripts_by_symbol: dict[str, Script] = {}
        self._scripts_by_template: dict[str, Script] = {}
        self._scripts_by_key: dict[str, Script] = {}
        self._scripts_by_layout: dict[str, Script] = {}
        self._layouts: dict[str, _Layout] = {}
        self._sessions: dict[str, tuple[str, str]] = {}  # name -> (session id, sign): live ones
        self._sent = threading.local()  # the session header values of the request being answered
        self.invalid_symbols: set[str] = set()
        self.charges: Charges = "admitted"  # what spends a unit of the daily quota (see above)
        self._requests: list[RecordedRequest] = []
        self._httpd = _Server(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self._httpd.server_bind()  # a bound socket that does not listen answers a connect with RST
        self._refusing = refusing_connections
        if not refusing_connections:
            self._httpd.server_activate()
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    # --- set-up ---

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_account(
        self,
        account_id: str,
        *,
        key: str | None = None,
        daily_quota: int | None = None,
        rate: float | None = None,
        burst: int = 1,
        plan: str = "ENTERPRISE",
    ) -> str:
        """Register a key (returned); quota None = unlimited, rate None = unpaced. The plan's
        resolution and parameter limits apply (ENTERPRISE: the loosest)."""
        key = key or new_key()
        with self._lock:
            self._accounts_by_key[key] = _Account(
                account_id,
                daily_quota,
                rate,
                burst,
                plan_named(plan),
                tokens=float(burst),
                updated=time.monotonic(),
            )
        return key

    def register_template(
        self, template_id: str, request: Mapping[str, Any], *, layout_id: str | None = None
    ) -> None:
        """Requests with this body (on `layout_id`'s Shared Layout path, when given) are
        recorded as `template_id`'s."""
        with self._lock:
            self._templates[_canonical(request, layout_id)] = template_id

    def add_layout(
        self, layout_id: str, *, private: bool = False, sessions: Iterable[str] = (), forbidden: bool = False
    ) -> None:
        """A TradingView layout the Shared Layout endpoint knows; a private one is reached
        only with a live session among `sessions`."""
        with self._lock:
            self._layouts[layout_id] = _Layout(private, frozenset(sessions), forbidden)

    def add_session(self, name: str, values: tuple[str, str] | None = None) -> tuple[str, str]:
        """A live TradingView session: its (session id, sign), new ones each shaped as a test
        key so the suite-wide leak scan knows them (`values`: those, live again)."""
        values = values or (new_key(), new_key())
        with self._lock:
            self._sessions[name] = values
        return values

    def expire_session(self, name: str) -> None:
        """The session ends (a logout, a new login): its headers now draw 409."""
        with self._lock:
            self._sessions.pop(name, None)

    def script(
        self,
        *,
        symbol: str | None = None,
        template: str | None = None,
        key: str | None = None,
        layout: str | None = None,
        **behaviour: Any,
    ) -> Script:
        """What to answer requests for this symbol, template, API key or layout (checked in
        that order)."""
        script = Script(**behaviour)
        with self._lock:
            if layout is not None:
                self._scripts_by_layout[layout] = script
            if symbol is not None:
                self._scripts_by_symbol[symbol] = script
            if template is not None:
                self._scripts_by_template[template] = script
            if key is not None:
                self._scripts_by_key[key] = script
        return script

    def refuse_request(
        self, *, symbol: str | None = None, template: str | None = None, status: int = 401
    ) -> Script:
        """Requests for this symbol or template are refused on every key (the docs' 401
        example, "Invalid Request", by default): a refusal the request causes."""
        return self.script(symbol=symbol, template=template, status=status)

    def throttle(self, *, retry_after: str | None = None) -> None:
        """Open a whole-service throttle window: every request is answered 429 "Too Many
        Requests" (with `retry_after` as its Retry-After header), whatever its key, until
        `end_throttle()`; nothing is counted against any key's quota."""
        reply = _json_reply(429, "Too Many Requests")
        if retry_after is not None:
            reply.headers["retry-after"] = retry_after
        with self._lock:
            self._throttle = reply

    def end_throttle(self) -> None:
        with self._lock:
            self._throttle = None

    @property
    def keys(self) -> list[str]:
        with self._lock:
            return list(self._accounts_by_key)

    # --- what happened ---

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def wait_for_request(self, matches: Callable[[RecordedRequest], bool]) -> RecordedRequest:
        """The first request that `matches`, once it has been admitted (an admission notifies
        the in-flight condition; pytest-timeout is the only guard against one that never is)."""
        with self._in_flight_changed:
            self._in_flight_changed.wait_for(lambda: any(matches(r) for r in self._requests))
            return next(r for r in self._requests if matches(r))

    def count(self, account_id: str | None = None) -> int:
        return len([r for r in self.requests if account_id is None or r.account_id == account_id])

    def statuses(self) -> list[int | None]:
        return [r.status for r in self.requests]

    def request_log(self) -> list[dict[str, Any]]:
        """Every request as plain values (what `GET /admin/requests` answers)."""
        return [dataclasses.asdict(r) for r in self.requests]

    def max_in_flight(self, account_id: str) -> int:
        with self._lock:
            return max(
                (a.max_in_flight for a in self._accounts_by_key.values() if a.account_id == account_id),
                default=0,
            )

    def peak_in_flight(self) -> int:
        """The most admitted calls answered at once, every key together."""
        with self._lock:
            return self._peak_in_flight

    # --- lifecycle ---

    def start(self) -> ChartImgServer:
        if not self._refusing:
            self._thread.start()
        return self

    def accept_connections(self) -> None:
        """The end of a `refusing_connections` outage: listen and answer from now on."""
        if self._refusing:
            self._refusing = False
            self._httpd.server_activate()
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in latency/hang
        with self._lock:
            scripts = [*self._scripts_by_symbol.values(), *self._scripts_by_template.values()]
            scripts += [*self._scripts_by_key.values(), *self._scripts_by_layout.values()]
        for script in scripts:
            if script.release is not None:
                script.release.set()  # and those held for the test's word
        with self._in_flight_changed:
            self._in_flight_changed.notify_all()  # and those held for a peak
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    # --- answering ---

    def handle(self, path: str, headers: Mapping[str, str], raw: bytes) -> _Reply:
        """Key, pace and quota first (a unit spent when `charges` is "admitted"), then the
        body, then the scripted answer: the stand-in's order, not one the docs give."""
        arrived = time.monotonic()
        layout_id = _layout_of(path)
        if path != PATH and layout_id is None:
            return _json_reply(404, "Not Found")
        sent, unreadable = _read_body(headers, raw)
        self._sent.sessions = tuple(headers[name] for name in SESSION_HEADERS if headers.get(name))
        # a layout's own symbol and interval stand when the body names none: nothing defaulted
        fill = unreadable is None and layout_id is None
        body, defaulted = _with_defaults(sent) if fill else (sent, ())
        with self._lock:
            key = headers.get("x-api-key") or ""
            account = self._accounts_by_key.get(key)
            record = self._record(
                account, arrived, None if unreadable else body, defaulted, layout_id=layout_id
            )
            record.received_digest = None if unreadable else request_sha256(sent)
            record.session, record.session_headers = self._session_of(headers)
            throttled = self._throttle
            refusal = throttled or self._admit(account, arrived)
            if account is not None and refusal is None:
                self._count_in_flight(account, +1)
        try:
            reply = (
                refusal
                or unreadable
                or self._layout_refusal(record)
                or self._check_request(account, body, layout=layout_id is not None)
                or self._answer(record, key, body)
            )
        finally:
            if account is not None and refusal is None:
                with self._lock:
                    self._count_in_flight(account, -1)
        with self._lock:
            if account is not None and self.charges == "rendered" and reply.status == 200:
                account.used += 1
            record.answered = time.monotonic()
            record.status = reply.status
            if reply.content_type == "application/json" and reply.body:
                answer = json.loads(reply.body)
                record.message = answer.get("message") if isinstance(answer, dict) else "validation"
        return reply

    def _record(
        self,
        account: _Account | None,
        arrived: float,
        body: Mapping[str, Any] | None,
        defaulted: tuple[str, ...],
        *,
        layout_id: str | None = None,
    ) -> RecordedRequest:
        """Under the lock: a new entry of the request log (body None: it could not be read)."""
        symbol, interval = (body.get("symbol"), body.get("interval")) if body is not None else (None, None)
        record = RecordedRequest(
            account.account_id if account else None,
            arrived,
            symbol if isinstance(symbol, str) else None,
            interval if isinstance(interval, str) else None,
            self._templates.get(_canonical(body, layout_id)) if body is not None else None,
            defaulted,
        )
        if layout_id is not None:
            record.endpoint, record.layout_id = "layout-chart", layout_id
        self._requests.append(record)
        return record

    def _session_of(self, headers: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
        """Under the lock: which live session the request's headers carry (its name;
        "unknown" when they match none; None when it sent none), and which of the two
        session headers it had."""
        sent = tuple(name for name in SESSION_HEADERS if headers.get(name))
        if not sent:
            return None, ()
        values = tuple(headers.get(name, "") for name in SESSION_HEADERS)
        named = next((name for name, live in self._sessions.items() if live == values), "unknown")
        return named, sent

    def _layout_refusal(self, record: RecordedRequest) -> _Reply | None:
        """A Shared Layout request's layout and session, as the docs describe them."""
        if record.layout_id is None:
            return None
        with self._lock:
            layout = self._layouts.get(record.layout_id)
        if layout is None:
            return _json_reply(404, "Not Found")
        if layout.forbidden:
            return _json_reply(403, "Layout Forbidden")
        both = len(record.session_headers) == len(SESSION_HEADERS)
        if both and record.session == "unknown":
            return _json_reply(409, "Session Disconnected")
        if layout.private and not (both and record.session in layout.sessions):
            return _json_reply(403, "Layout Forbidden")
        return None

    def _count_in_flight(self, account: _Account, change: int) -> None:
        """Under the lock: the key's and the server's calls in flight, and their peaks."""
        account.in_flight += change
        account.max_in_flight = max(account.max_in_flight, account.in_flight)
        self._in_flight += change
        self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        self._in_flight_changed.notify_all()

    @staticmethod
    def _check_request(
        account: _Account | None, body: Mapping[str, Any], *, layout: bool = False
    ) -> _Reply | None:
        """The body checks CHART-IMG documents for Snapshot v2, against the key's plan (a
        layout's body: its market only when it names one)."""
        assert account is not None  # _admit refused unknown keys
        width, height = body.get("width", 800), body.get("height", 600)
        small = [
            (n, v, f"must be at least {m}") for n, v, m in (("width", width, 400), ("height", height, 300))
        ]
        small = [p for p in small if _number(p[1]) and p[1] < int(p[2].rsplit(" ", 1)[1])]
        named = all(name in body for name in MARKET)
        problems = (_market_problems(body) if named or not layout else []) + small
        if problems:
            return _validation_reply(*problems)
        plan = account.plan
        if _number(width) and _number(height) and (width > plan.max_width or height > plan.max_height):
            return _json_reply(403, f"Exceed Max Usage Resolution Limit ({plan.max_width}x{plan.max_height})")
        parameters = len(body.get("studies") or []) + len(body.get("drawings") or [])
        if parameters > plan.max_parameters:
            return _json_reply(403, f"Exceed Max Usage Parameter Limit ({plan.max_parameters})")
        return None

    def _admit(self, account: _Account | None, now: float) -> _Reply | None:
        """Auth, rate and quota, under the lock (the order CHART-IMG applies them in)."""
        if account is None:
            return _json_reply(403, "Forbidden")
        if account.rate is not None:
            account.tokens = min(account.burst, account.tokens + (now - account.updated) * account.rate)
            account.updated = now
            if account.tokens < 1.0:
                return _json_reply(429, "Too Many Requests")
            account.tokens -= 1.0
        if account.daily_quota is not None and account.used >= account.daily_quota:
            return _json_reply(429, "Limit Exceeded")
        if self.charges == "admitted":
            account.used += 1
        return None

    def _answer(self, record: RecordedRequest, key: str, body: Mapping[str, Any]) -> _Reply:
        if record.symbol in self.invalid_symbols:
            return _json_reply(422, "Invalid Symbol")
        with self._lock:
            script = (
                self._scripts_by_symbol.get(record.symbol or "")
                or (self._scripts_by_template.get(record.template) if record.template else None)
                or self._scripts_by_key.get(key)
                or self._scripts_by_layout.get(record.layout_id or "")
            )
        if script is None:
            return _Reply(200, PNG, "image/png")
        if script.latency:
            self._wait(script)
        if script.hang:
            self._stopping.wait(script.hang)
            return _json_reply(504, "Endpoint request timed out")
        with self._lock:
            fail_now = script.failed < script.fail_times
            script.failed += fail_now
        if fail_now:
            return _scripted_error(script, script.fail_status, script.fail_message or "", self._echoed(key))
        if script.status is not None:
            return _scripted_error(script, script.status, script.message or "", self._echoed(key))
        if script.non_png:
            return _Reply(200, b"<html><body>maintenance</body></html>", "text/html")
        return _Reply(200, PNG, "image/png")

    def _echoed(self, key: str) -> tuple[str, ...]:
        """What a careless provider echoes: the key, then the session header values sent."""
        return (key, *getattr(self._sent, "sessions", ()))

    def _wait(self, script: Script) -> None:
        if script.release is not None:
            script.release.wait(script.latency)
            return
        if not script.hold_until_in_flight:
            self._stopping.wait(script.latency)
            return
        with self._in_flight_changed:
            self._in_flight_changed.wait_for(
                lambda: self._peak_in_flight >= script.hold_until_in_flight or self._stopping.is_set(),
                timeout=script.latency,
            )


def _scripted_error(script: Script, status: int, message: str, secrets: tuple[str, ...]) -> _Reply:
    if script.empty_body:
        reply = _Reply(status, b"")
    elif script.echo_key:
        reply = _Reply(status, _echoing_body(message, secrets, script.echo_key))
    else:
        reply = _json_reply(status, message)
    if script.retry_after is not None:
        reply.headers["retry-after"] = script.retry_after
    return reply


def _echoing_body(message: str, secrets: tuple[str, ...], forms: tuple[str, ...]) -> bytes:
    """`{"message": "<message> (<form>)", "errors": [{"param": "x-api-key", "msg": <form>}...]}`
    for each secret (the key first, then any session value) and form, each form written into
    the JSON text as it is: a JSON-escaped form stays escaped in the bytes (the parsed body
    then holds the secret itself), any other is escaped only as JSON must."""
    from harness.secret_scan import key_forms  # lazily: run as a script, only tests echo

    def in_json(written: dict[str, str], form: str) -> str:
        return written[form] if form.startswith("json") else json.dumps(written[form])[1:-1]

    every = [key_forms(secret) for secret in secrets]
    entries = ", ".join(
        f'{{"param": "x-api-key", "msg": "{in_json(written, form)}"}}' for written in every for form in forms
    )
    head = json.dumps(message)[1:-1]
    return f'{{"message": "{head} ({in_json(every[0], forms[0])})", "errors": [{entries}]}}'.encode()


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # many concurrent clients: a full backlog would refuse connects


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's pool expects
    # one segment per answer: headers and body written apart meet delayed ACKs (~40 ms)
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._send(self.server.owner.handle(self.path, headers, raw))  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        """`GET /admin/requests`: the request log as JSON (account ids, never keys)."""
        owner: ChartImgServer = self.server.owner  # type: ignore[attr-defined]
        if self.path == ADMIN_REQUESTS_PATH:
            self._send(_Reply(200, json.dumps(owner.request_log()).encode()))
        else:
            self._send(_json_reply(404, "Not Found"))

    def _send(self, reply: _Reply) -> None:
        try:
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            self.send_header("content-length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout) before we answered

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: and the request line never holds the key anyway


@pytest.fixture
def chart_img_server() -> Iterator[ChartImgServer]:
    server = ChartImgServer().start()
    try:
        yield server
    finally:
        server.stop()


# --- helpers for tests that drive the ChartApi ---------------------------------------------


def chart_call(
    template_id: str,
    request: Mapping[str, Any] | None = None,
    *,
    symbol: str = "BINANCE:BTCUSDT",
    interval: str = "1h",
    run_id: str = "run-1",
    step_id: str = "step-1",
) -> ChartCall:
    """A ChartCall as execute.py builds it: template request + symbol + interval."""
    body = {
        **(request or {"width": 800, "height": 600, "theme": "dark"}),
        "symbol": symbol,
        "interval": interval,
    }
    return ChartCall(
        run_id=run_id,
        step_id=step_id,
        chart_template_id=template_id,
        chart_img_symbol=symbol,
        interval=interval,
        body=body,
        fixture_key=fixture_key(symbol, interval, template_id),
    )


def peak_in_flight_of(log: Iterable[Mapping[str, Any]]) -> int:
    """The most requests of a request log (`request_log()`, `GET /admin/requests`) being
    answered at once: the overlap of their [arrived, answered] intervals."""
    edges = sorted(
        edge
        for r in log
        if r.get("answered") is not None
        for edge in ((r["arrived"], 1), (r["answered"], -1))
    )
    peak = current = 0
    for _, change in edges:  # at a tie the end (-1) sorts first: touching is not overlapping
        current += change
        peak = max(peak, current)
    return peak


def connections_all_free(api: Any) -> bool:
    """Every connection permit of a real/record chart API back in place (mock has none):
    an attempt that kept one would shrink the instance's capacity for good."""
    client = getattr(getattr(api, "real", api), "client", None)
    if client is None:
        return True
    taken: int = client.permits.take_available(client.permits.size)
    client.permits.release(taken)
    return bool(taken == client.permits.size)


def find_secrets(haystacks: Iterable[str], keys: Iterable[str]) -> list[str]:
    """Which keys occur anywhere in the given texts, in any form (expected: none)."""
    from harness.secret_scan import leaks

    return leaks(haystacks, keys)


class FakeClock(testing.FakeClock):
    """worker_chart_export.testing.FakeClock, starting mid-day on a fixed date."""

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__(start or datetime(2025, 1, 15, 12, 0, tzinfo=UTC))


# --- as a process of its own -------------------------------------------------------------
# Benchmarks run the stand-in in a separate process, as CHART-IMG is: in-process, its threads
# would compete with the worker's for the GIL and inflate every measurement.


def serve_from_stdin(argv: list[str] | None = None) -> None:
    """`python tests/harness/chart_img_server.py --latency 0.3 --account ID=KEY[:RATE:BURST[:QUOTA]] ...`

    Prints the base URL on the first line, serves until stdin closes, then prints one JSON
    line with the statuses it answered per account, and exits. Meanwhile
    `GET <base URL>/admin/requests` answers the request log as JSON (on 127.0.0.1 only).
    An empty RATE or QUOTA means unlimited: `ID=KEY:1:3` paces, `ID=KEY:::5` only counts.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=serve_from_stdin.__doc__)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--symbol", default="BINANCE:BTCUSDT", help="symbol the latency applies to")
    parser.add_argument("--account", action="append", default=[], help="ID=KEY[:RATE:BURST[:QUOTA]]")
    parser.add_argument(
        "--templates-dir",
        action="append",
        default=[],
        help="a folder of chart templates (*.json) whose requests are recognised as their ids",
    )
    args = parser.parse_args(argv)
    server = ChartImgServer().start()
    if args.latency:
        server.script(symbol=args.symbol, latency=args.latency)
    for spec in args.account:
        account_id, key, rate, burst, quota = parse_account_spec(spec)
        server.add_account(account_id, key=key, rate=rate, burst=burst, daily_quota=quota)
    for folder in args.templates_dir:
        register_templates_from(server, Path(folder))
    print(server.base_url, flush=True)
    sys.stdin.read()
    statuses: dict[str, list[int | None]] = {}
    for request in server.requests:
        statuses.setdefault(request.account_id or "-", []).append(request.status)
    server.stop()
    print(json.dumps(statuses), flush=True)


def parse_account_spec(spec: str) -> tuple[str, str, float | None, int, int | None]:
    """`ID=KEY[:RATE:BURST[:QUOTA]]` -> (id, key, rate or None, burst, quota or None)."""
    account_id, sep, rest = spec.partition("=")
    key, *limits = rest.split(":")
    if not sep or not account_id or not key or len(limits) > 3:
        raise SystemExit(f"--account wants ID=KEY[:RATE:BURST[:QUOTA]], got {spec.split('=')[0]}=...")
    rate_text, burst_text, quota_text = [*limits, "", "", ""][:3]
    rate = float(rate_text) if rate_text else None
    burst = int(burst_text) if burst_text else 1
    quota = int(quota_text) if quota_text else None
    return account_id, key, rate, burst, quota


def register_templates_from(server: ChartImgServer, folder: Path, timezone: str = "Etc/UTC") -> None:
    """Teach the server each template's request (as the worker builds it: timezone defaulted),
    and each layout template's layout (private: reached by the session the template names)."""
    for path in sorted(folder.glob("*.json")):
        template = json.loads(path.read_text(encoding="utf-8"))
        template_id = str(template.get("id") or path.stem)
        if "layout" in template:  # a layout's body has no timezone
            layout = template["layout"]
            named = [layout["session"]] if layout.get("session") else []
            server.add_layout(layout["layoutId"], private=layout.get("private") is True, sessions=named)
            server.register_template(template_id, layout.get("request", {}), layout_id=layout["layoutId"])
            continue
        request = {"timezone": timezone, **template["request"]}
        server.register_template(template_id, request)


if __name__ == "__main__":
    serve_from_stdin()
