"""The chaos stand-in (tests/harness/chaos_stand_in.py) answers each window as issue 27 says,
over raw HTTP with a keep-alive client, and logs which window answered each request."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.chaos_stand_in import ChaosChartImgServer, apply_control
from harness.chart_img_server import PATH
from harness.naming_contract import request_sha256
from harness.png_digest import digest_in_png

BODY = {"symbol": "BINANCE:C0001USDT", "interval": "1h", "width": 800, "height": 600, "theme": "dark"}


@pytest.fixture
def server() -> Iterator[ChaosChartImgServer]:
    stand_in = ChaosChartImgServer()
    stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


@pytest.fixture
def client(server: ChaosChartImgServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:  # one pool, kept alive
        yield http


def post(client: httpx.Client, key: str, body: dict[str, Any] = BODY) -> httpx.Response:
    return client.post(PATH, json=body, headers={"x-api-key": key})


def chunks(png: bytes) -> list[tuple[bytes, bytes, int]]:
    at, found = 8, []
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        found.append((kind, data, crc))
        at += 12 + length
    return found


def test_a_chart_carries_the_digest_of_the_body_it_was_drawn_from(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    key = server.add_account("a1")
    first, other = post(client, key), post(client, key, {**BODY, "theme": "light"})
    assert first.status_code == other.status_code == 200
    assert digest_in_png(first.content) == request_sha256(BODY)
    assert digest_in_png(other.content) == request_sha256({**BODY, "theme": "light"}) != request_sha256(BODY)
    found = chunks(first.content)
    assert [k for k, _, _ in found] == [b"IHDR", b"IDAT", b"tEXt", b"IEND"]
    assert all(zlib.crc32(kind + data) == crc for kind, data, crc in found)  # a valid PNG
    assert [r["digest"] for r in server.request_log()] == [
        request_sha256(BODY),
        request_sha256({**BODY, "theme": "light"}),
    ]
    assert digest_in_png(b"<html>") is None


def test_a_refusal_window_refuses_connections_even_on_a_kept_alive_pool(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    key = server.add_account("a1")
    assert post(client, key).status_code == 200  # the pool now holds an idle connection
    server.refuse("refuse#1")
    with pytest.raises(httpx.ConnectError):
        post(client, key)
    assert len(server.request_log()) == 1  # the refused call never reached the stand-in
    server.accept()
    assert post(client, key).status_code == 200
    assert [r["chaos"] for r in server.request_log()] == [None, None]


def test_a_throttle_window_answers_every_key_429_without_spending_a_unit(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    keys = [server.add_account(f"a{i}", daily_quota=10) for i in range(2)]
    apply_control(server, {"action": "throttle", "window": "throttle#1"})
    answers = [post(client, key) for key in keys]
    assert [(a.status_code, a.json()) for a in answers] == [(429, {"message": "Too Many Requests"})] * 2
    assert [u["used"] for u in server.account_usage()] == [0, 0]
    apply_control(server, {"action": "throttle", "window": None})
    assert post(client, keys[0]).status_code == 200
    assert [r["chaos"] for r in server.request_log()] == ["throttle#1", "throttle#1", None]


@pytest.mark.parametrize(
    ("status", "words"), [(500, "Something Went Wrong"), (504, "External Request Timeout")]
)
def test_a_fault_burst_answers_every_admitted_request_and_spends_its_unit(
    server: ChaosChartImgServer, client: httpx.Client, status: int, words: str
) -> None:
    key = server.add_account("a1", daily_quota=10)
    apply_control(server, {"action": "fault", "status": status, "window": f"fault_{status}#1", "delay": 0.01})
    answer = post(client, key)
    assert (answer.status_code, answer.json()) == (status, {"message": words})
    assert server.account_usage()[0]["used"] == 1  # as CHART-IMG's gateway may count it
    apply_control(server, {"action": "fault", "status": None, "window": f"fault_{status}#1"})
    assert post(client, key).status_code == 200
    assert [r["chaos"] for r in server.request_log()] == [f"fault_{status}#1", None]


def test_a_key_spent_by_another_client_answers_limit_exceeded_from_then_on(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    spent, other = server.add_account("a1", daily_quota=50), server.add_account("a2", daily_quota=50)
    assert post(client, spent).status_code == 200
    server.exhaust("a1", "key_exhausted#1")
    answer = post(client, spent)
    assert (answer.status_code, answer.json()) == (429, {"message": "Limit Exceeded"})
    assert post(client, other).status_code == 200
    assert [r["chaos"] for r in server.request_log()] == [None, "key_exhausted#1", None]
    books = server.account_usage()
    # its day is used up, 1 unit of it by our call: the stand-in charged us that one alone
    assert {k: books[0][k] for k in ("account_id", "used", "quota", "charged")} == {
        "account_id": "a1",
        "used": 50,
        "quota": 50,
        "charged": 1,
    }
    assert books[0]["exhausted_at"] is not None and books[1]["exhausted_at"] is None


def test_the_books_charge_each_admitted_call_and_no_429_and_say_when_a_day_is_used_up(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    key = server.add_account("a1", daily_quota=2, rate=1.0, burst=2)
    statuses = [post(client, key).status_code for _ in range(3)]  # the third is past the burst
    assert statuses == [200, 200, 429]
    server.throttle_window("throttle#1")
    assert post(client, key).status_code == 429
    (books,) = server.account_usage()
    assert (books["used"], books["charged"]) == (2, 2)  # the two 200s; the 429s spent nothing
    assert books["exhausted_at"] is not None  # the second call used the day up


def test_a_refused_template_draws_401_and_an_edited_one_is_recognised(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    key = server.add_account("a1")
    refused = {k: v for k, v in BODY.items() if k not in ("symbol", "interval")}
    server.register_template("t_refused", refused)
    server.refuse_template("t_refused", "template_401#1")
    answer = post(client, key)
    assert (answer.status_code, answer.json()) == (401, {"message": "Invalid Request"})
    server.register_template("t_edited", {**refused, "theme": "light"})
    edit = {"action": "register_template", "template": "t_edited", "request": {**refused, "width": 792}}
    apply_control(server, {**edit, "version": "template_edit#1"})
    assert post(client, key, {**BODY, "width": 792}).status_code == 200
    assert post(client, key, {**BODY, "theme": "light"}).status_code == 200
    assert post(client, key, {**BODY, "width": 640}).status_code == 200  # no template's body
    assert [(r["template"], r["template_version"], r["chaos"]) for r in server.request_log()] == [
        ("t_refused", "initial", "template_401#1"),
        ("t_edited", "template_edit#1", None),
        ("t_edited", "initial", None),
        (None, None, None),
    ]


def test_an_unknown_control_is_refused_by_name(server: ChaosChartImgServer) -> None:
    with pytest.raises(ValueError, match="'explode'"):
        apply_control(server, {"action": "explode"})


def test_overlapping_bursts_answer_by_the_newest_open_one(
    server: ChaosChartImgServer, client: httpx.Client
) -> None:
    key = server.add_account("a1")
    server.fault(500, "fault_500#1")
    server.fault(504, "fault_504#1")
    server.fault(None, "fault_504#1")
    assert post(client, key).status_code == 500
    server.fault(504, "fault_504#2")
    assert post(client, key).status_code == 504
    server.fault(None, "fault_500#1")
    server.fault(None, "fault_504#2")
    assert post(client, key).status_code == 200
    assert [r["chaos"] for r in server.request_log()] == ["fault_500#1", "fault_504#2", None]
