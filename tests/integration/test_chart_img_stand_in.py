"""The CHART-IMG stand-in answers as the docs say (doc.chart-img.com, Snapshot v2 Advanced Chart,
Shared Layout and Errors / API v2, as contracts/chart-img/ holds them): raw HTTP on 127.0.0.1,
no worker code."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from harness.chart_img_server import BAD_INTERVAL, BAD_SYMBOL, LAYOUT_PATH, PATH, PNG, ChartImgServer
from harness.secret_scan import leaks
from worker_chart_export.bundled import chart_img_docs

# The docs give the minimum size, not the msg of its refusal: the stand-in's own wording
# (its docstring says so).
STAND_IN_MSGS = {"must be at least 400", "must be at least 300"}


@pytest.fixture
def client(chart_img_server: ChartImgServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=chart_img_server.base_url, timeout=10) as http:
        yield http


def post(client: httpx.Client, key: str, body: Any = None, **kwargs: Any) -> httpx.Response:
    if body is not None:
        kwargs["json"] = body
    return client.post(PATH, headers={"x-api-key": key, **kwargs.pop("headers", {})}, **kwargs)


def assert_documented(response: httpx.Response) -> None:
    """A JSON error CHART-IMG shows in its Errors section (400/404: the status table's Type)."""
    assert response.headers["content-type"] == "application/json"
    body, errors = response.json(), chart_img_docs.errors()
    if isinstance(body, list):
        assert response.status_code == 422
        assert all(set(i) == {"value", "msg", "param", "location"} and i["location"] == "body" for i in body)
        assert {i["msg"] for i in body} <= {BAD_SYMBOL, BAD_INTERVAL, *STAND_IN_MSGS}
    elif response.status_code in (400, 404):
        assert body == {"message": errors.status_types[response.status_code]}
    else:
        assert body["message"] in errors.messages(response.status_code), (response.status_code, body)


# --- the body is optional ------------------------------------------------------------------


def test_no_body_is_a_chart_of_the_documented_defaults(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    answer = post(client, key)
    assert (answer.status_code, answer.content) == (200, PNG)
    [record] = chart_img_server.requests
    assert (record.symbol, record.interval, record.defaulted) == (
        "BINANCE:BTCUSDT",
        "1D",
        ("symbol", "interval"),
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"interval": "1h"}, ("BINANCE:BTCUSDT", "1h", ("symbol",))),
        ({"symbol": "CME_MINI:ES1!"}, ("CME_MINI:ES1!", "1D", ("interval",))),
        ({"symbol": "BYBIT:BTCUSDT.P", "interval": "2m"}, ("BYBIT:BTCUSDT.P", "2m", ())),
    ],
)
def test_a_missing_symbol_or_interval_gets_its_default(
    chart_img_server: ChartImgServer, client: httpx.Client, body: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    answer = post(client, chart_img_server.add_account("acc1"), body)
    assert answer.status_code == 200
    [record] = chart_img_server.requests
    assert (record.symbol, record.interval, record.defaulted) == expected


def test_each_request_is_logged_with_the_request_digest_of_the_body_it_received(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    """The naming contract's requestDigest of the JSON received, whatever its key order or
    spacing on the wire (the value a worker's PNG of it must carry); none for unreadable JSON.
    The hex is `sha256sum` of the canonical text,
    {"interval":"1h","symbol":"BINANCE:BTCUSDT","theme":"dark","title":"caf\\u00e9"}."""
    key = chart_img_server.add_account("acc1")
    json_headers = {"content-type": "application/json"}
    wire = '{"symbol": "BINANCE:BTCUSDT",  "interval": "1h", "title": "café", "theme": "dark"}'
    post(client, key, content=wire.encode(), headers=json_headers)
    post(client, key, content=b"{", headers=json_headers)
    assert [r.received_digest for r in chart_img_server.requests] == [
        "ffc6e5a1c49b7d2f6d0b1af103d72b4bbbb7f4fc54e49ea80a2479b78c7eb080",
        None,
    ]


# --- refusals of the body ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b'{"symbol": "BINANCE:BTCUSDT",', "application/json"),
        (b"\xff\xfe not text", "application/json"),
        (b'{"symbol": "BINANCE:BTCUSDT"}', "text/plain"),
        (b"symbol=BINANCE:BTCUSDT", "application/x-www-form-urlencoded"),
    ],
)
def test_invalid_json_or_another_content_type_is_a_400(
    chart_img_server: ChartImgServer, client: httpx.Client, content: bytes, content_type: str
) -> None:
    answer = post(
        client, chart_img_server.add_account("acc1"), content=content, headers={"content-type": content_type}
    )
    assert (answer.status_code, answer.json()) == (400, {"message": "Bad Request"})
    assert_documented(answer)
    [record] = chart_img_server.requests
    assert (record.symbol, record.template, record.defaulted, record.message) == (
        None,
        None,
        (),
        "Bad Request",
    )


def test_json_that_is_not_an_object_is_an_invalid_request(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    answer = post(client, chart_img_server.add_account("acc1"), ["BINANCE:BTCUSDT"])
    assert (answer.status_code, answer.json()) == (422, {"message": "Invalid Request"})
    assert_documented(answer)


def test_a_bad_symbol_or_interval_gets_the_documented_422_array(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    answer = post(client, chart_img_server.add_account("acc1"), {"symbol": "", "interval": "7x"})
    assert answer.status_code == 422
    assert answer.json() == [
        {
            "value": "",
            "msg": "must be a valid tradingview EXCHANGE:SYMBOL",
            "param": "symbol",
            "location": "body",
        },
        {"value": "7x", "msg": "must be a supported interval", "param": "interval", "location": "body"},
    ]
    # the very wording of the docs' example
    [documented] = [b for b in chart_img_docs.errors().examples[422] if isinstance(b, tuple)]
    assert [(i["param"], i["msg"]) for i in documented] == [
        ("symbol", BAD_SYMBOL),
        ("interval", BAD_INTERVAL),
    ]


# --- 401, 409, 504 on demand ---------------------------------------------------------------


def test_401_409_and_504_can_be_scripted_per_key_symbol_and_template(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    refused, fine = chart_img_server.add_account("refused"), chart_img_server.add_account("fine")
    chart_img_server.script(key=refused, status=401)
    chart_img_server.script(symbol="TVC:DXY", status=409)
    chart_img_server.register_template("tpl_slow", {"width": 640})
    chart_img_server.script(template="tpl_slow", status=504)
    answers = [
        post(client, refused, {"symbol": "BINANCE:BTCUSDT", "interval": "1h"}),
        post(client, fine, {"symbol": "BINANCE:BTCUSDT", "interval": "1h"}),
        post(client, fine, {"symbol": "TVC:DXY", "interval": "1h"}),
        post(client, fine, {"symbol": "BINANCE:ETHUSDT", "interval": "1h", "width": 640}),
    ]
    assert [(a.status_code, a.json() if a.status_code != 200 else None) for a in answers] == [
        (401, {"message": "Invalid Request"}),
        (200, None),
        (409, {"message": "Session Disconnected"}),
        (504, {"message": "External Request Timeout"}),
    ]
    assert [r.account_id for r in chart_img_server.requests] == ["refused", "fine", "fine", "fine"]


def test_a_symbol_script_wins_over_a_key_script(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    chart_img_server.script(key=key, status=401)
    chart_img_server.script(symbol="BINANCE:ETHUSDT", status=504, message="Endpoint request timed out")
    assert post(client, key, {"symbol": "BINANCE:ETHUSDT"}).json() == {
        "message": "Endpoint request timed out"
    }
    assert post(client, key, {"symbol": "BINANCE:BTCUSDT"}).status_code == 401


def test_a_scripted_message_must_be_documented_unless_said_otherwise(
    chart_img_server: ChartImgServer,
) -> None:
    with pytest.raises(ValueError, match="not a documented API v2 answer"):
        chart_img_server.script(symbol="X:Y", status=504, message="Gateway Timeout")
    with pytest.raises(ValueError, match="not a documented API v2 answer"):
        chart_img_server.script(symbol="X:Y", fail_times=1, fail_status=429, fail_message="Slow Down")
    with pytest.raises(ValueError, match="the docs show no message for HTTP 400"):
        chart_img_server.script(symbol="X:Y", status=400)
    unknown = chart_img_server.script(symbol="X:Y", status=429, message="Quota Gone", undocumented=True)
    assert unknown.message == "Quota Gone"


# --- every answer of its own is documented -------------------------------------------------


def test_every_error_the_stand_in_gives_by_itself_is_documented(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    basic = chart_img_server.add_account("basic", plan="BASIC", rate=0.001, burst=7, daily_quota=6)
    chart_img_server.invalid_symbols.add("BINANCE:NOPE")
    chart_img_server.script(symbol="BINANCE:DOWN", fail_times=1)
    four = [{"name": n} for n in ("Volume", "MACD", "Relative Strength Index", "Stochastic")]
    answers = [
        post(client, "not-a-key"),  # 403 Forbidden
        post(client, basic, {"width": 1920}),  # 403 resolution
        post(client, basic, {"studies": four}),  # 403 parameters
        post(client, basic, {"symbol": "BINANCE:NOPE"}),  # 422 Invalid Symbol
        post(client, basic, {"symbol": "BINANCE:DOWN"}),  # 500
        post(client, basic, content=b"{", headers={"content-type": "application/json"}),  # 400
        post(client, basic, {"width": 300}),  # 422 array
        post(client, basic),  # 429 Limit Exceeded (6 used)
        post(client, basic),  # 429 Too Many Requests (the burst of 7 is spent)
    ]
    assert [a.status_code for a in answers] == [403, 403, 403, 422, 500, 400, 422, 429, 429]
    for answer in answers:
        assert_documented(answer)
    assert client.get("/v1/nowhere").status_code == 404
    assert_documented(client.post("/v1/nowhere"))
    assert [a.json()["message"] for a in answers[-2:]] == ["Limit Exceeded", "Too Many Requests"]


# --- what spends a unit: the stand-in's choice -----------------------------------------------


@pytest.mark.parametrize(
    ("charges", "statuses"),
    [
        ("admitted", [422, 400, 429, 429]),  # every admitted request spends a unit
        ("rendered", [422, 400, 200, 200]),  # only images do
    ],
)
def test_what_counts_against_the_quota_is_a_setting(
    chart_img_server: ChartImgServer, client: httpx.Client, charges: str, statuses: list[int]
) -> None:
    chart_img_server.charges = charges  # type: ignore[assignment]
    key = chart_img_server.add_account("acc1", daily_quota=2)
    answers = [
        post(client, key, {"interval": "7x"}),
        post(client, key, content=b"{", headers={"content-type": "application/json"}),
        post(client, key, {"interval": "1h"}),
        post(client, key, {"interval": "1h"}),
    ]
    assert [a.status_code for a in answers] == statuses
    log = json.loads(json.dumps(chart_img_server.request_log()))  # plain values, as served
    assert [r["status"] for r in log] == statuses


# --- the Shared Layout endpoint (issue 40) ------------------------------------------------


def post_layout(
    client: httpx.Client, key: str, layout_id: str, body: Any = None, session: tuple[str, ...] = ()
) -> httpx.Response:
    headers = {"x-api-key": key}
    headers.update(zip(("tradingview-session-id", "tradingview-session-id-sign"), session, strict=False))
    return client.post(LAYOUT_PATH + layout_id, json=body, headers=headers)


def test_a_shared_layout_renders_without_a_session_and_is_logged_as_a_layout_call(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    chart_img_server.add_layout("37wLAGgd")
    chart_img_server.register_template("mine_v1", {"width": 800}, layout_id="37wLAGgd")
    answer = post_layout(
        client, key, "37wLAGgd", {"symbol": "BINANCE:ETHUSDT", "interval": "4h", "width": 800}
    )
    assert (answer.status_code, answer.content) == (200, PNG)
    (record,) = chart_img_server.requests
    assert (record.endpoint, record.layout_id, record.template) == ("layout-chart", "37wLAGgd", "mine_v1")
    assert (record.symbol, record.interval, record.defaulted) == ("BINANCE:ETHUSDT", "4h", ())
    assert (record.session, record.session_headers) == (None, ())
    # no body: the layout's own symbol and interval, nothing filled in
    assert post_layout(client, key, "37wLAGgd").status_code == 200
    assert chart_img_server.requests[-1].defaulted == ()


def test_a_private_layout_needs_both_headers_of_a_live_session_it_lists(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    mine = chart_img_server.add_session("mine")
    other = chart_img_server.add_session("other")
    chart_img_server.add_layout("OKyFXMzN", private=True, sessions=["mine"])
    answers = [
        post_layout(client, key, "OKyFXMzN"),  # no session
        post_layout(client, key, "OKyFXMzN", session=mine[:1]),  # one header only
        post_layout(client, key, "OKyFXMzN", session=other),  # a live session it does not list
        post_layout(client, key, "OKyFXMzN", session=mine),
    ]
    assert [a.status_code for a in answers] == [403, 403, 403, 200]
    for answer in answers[:3]:
        assert answer.json() == {"message": "Layout Forbidden"}
        assert_documented(answer)
    log = chart_img_server.request_log()
    assert [(r["session"], len(r["session_headers"])) for r in log] == [
        (None, 0),
        ("unknown", 1),
        ("other", 2),
        ("mine", 2),
    ]
    assert not leaks([repr(log)], [*mine, *other])  # names, never values


def test_a_session_no_longer_live_is_disconnected_an_unknown_layout_is_404_a_forbidden_one_403(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    mine = chart_img_server.add_session("mine")
    chart_img_server.add_layout("OKyFXMzN", private=True, sessions=["mine"])
    chart_img_server.add_layout("Locked01", forbidden=True)
    chart_img_server.expire_session("mine")
    answers = [
        post_layout(client, key, "OKyFXMzN", session=mine),
        post_layout(client, key, "Missing1"),
        post_layout(client, key, "Locked01", session=mine),
        post_layout(client, key, "not-an-id"),  # no LAYOUT_ID path at all
    ]
    assert [a.status_code for a in answers] == [409, 404, 403, 404]
    assert [a.json()["message"] for a in answers] == [
        "Session Disconnected",
        "Not Found",
        "Layout Forbidden",
        "Not Found",
    ]
    for answer in answers:
        assert_documented(answer)


def test_the_body_is_held_to_the_documented_minimum_and_the_plans_maximum(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("basic", plan="BASIC")
    chart_img_server.add_layout("37wLAGgd")
    small = post_layout(client, key, "37wLAGgd", {"width": 300})
    large = post_layout(client, key, "37wLAGgd", {"width": 1920, "height": 1080})
    bad = post_layout(client, key, "37wLAGgd", {"symbol": "BINANCE:BTCUSDT", "interval": "7m"})
    assert [small.status_code, large.status_code, bad.status_code] == [422, 403, 422]
    for answer in (small, large, bad):
        assert_documented(answer)


def test_a_layout_answers_slower_by_an_injected_delay_the_test_releases(
    chart_img_server: ChartImgServer, client: httpx.Client
) -> None:
    key = chart_img_server.add_account("acc1")
    chart_img_server.add_layout("37wLAGgd")
    release = threading.Event()
    chart_img_server.script(layout="37wLAGgd", latency=60.0, release=release)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post_layout, client, key, "37wLAGgd")
        chart_img_server.wait_for_request(lambda r: r.layout_id == "37wLAGgd")  # it has arrived
        # the advanced chart is not held: it answers while the layout call waits
        assert client.post("/v2/tradingview/advanced-chart", headers={"x-api-key": key}).status_code == 200
        assert not pending.done()
        assert [r.status for r in chart_img_server.requests if r.layout_id] == [None]  # still in flight
        release.set()
        assert pending.result().status_code == 200
