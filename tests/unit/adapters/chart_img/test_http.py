"""The HTTP exchange (adapters/chart_img/http.py) as the chart API makes it: one POST with
the key in its header, the answer's body as JSON or text, a key echoed back redacted.
Over the scripted transport and a FakeClock (scripted.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from harness.chart_img_server import PNG
from unit.adapters.chart_img.scripted import KEYS, Rig, failure, png
from worker_chart_export.adapters.chart_img.http import parse_retry_after
from worker_chart_export.core.types import ChartSuccess
from worker_chart_export.testing import FakeClock


def test_posts_the_body_with_the_key_and_returns_the_png(rig: Callable[..., Rig]) -> None:
    r = rig([png()])
    result = r.render(template="tpl_a")
    assert result == ChartSuccess(PNG, "acc1")
    (request,) = r.transport.seen
    assert request.method == "POST"
    assert str(request.url) == "https://chart-img.test/v2/tradingview/advanced-chart"
    assert request.headers["x-api-key"] == KEYS["acc1"]
    body = json.loads(request.content)
    assert body["symbol"] == "BINANCE:BTCUSDT" and body["interval"] == "1h" and body["width"] == 800
    assert r.store.snapshot()["acc1"]["usageToday"] == 1


def test_text_error_body_is_kept_as_text(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.Response(403, text="Forbidden by WAF")])
    assert failure(r.render())["details"]["message"] == "Forbidden by WAF"


@pytest.mark.parametrize("status", [401, 201, 500], ids=["refused", "another-success", "server-error"])
def test_a_key_echoed_in_an_error_body_is_redacted(rig: Callable[..., Rig], status: int) -> None:
    r = rig(
        [httpx.Response(status, json={"message": f"Unknown key {KEYS['acc1']}"})], chart_img_max_attempts=1
    )
    assert failure(r.render())["details"]["message"] == "Unknown key <redacted>"


# --- Retry-After (RFC 9110: delay-seconds or an HTTP-date), read against the injected clock ---

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)  # FakeClock's start


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 12 ", 12.0),
        ("Sun, 22 Nov 2026 10:00:30 GMT", 30.0),  # 30 s after the clock's now
        ("Sun, 22 Nov 2026 11:00:30 +0100", 30.0),  # the same moment in another zone
        ("Sun, 22 Nov 2026 09:59:00 GMT", 0.0),  # already passed: no wait, never a negative one
        ("Sun, 22 Nov 2026 10:00:30 -0000", None),  # RFC 2822's "zone unknown": not a moment
        ("soon", None),
        ("-3", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_seconds_from_now(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, FakeClock(NOW)) == seconds


def test_a_retry_after_date_is_read_against_the_clock_as_it_moves() -> None:
    clock = FakeClock(NOW)
    clock.advance(10)
    assert parse_retry_after("Sun, 22 Nov 2026 10:00:30 GMT", clock) == 20.0


# --- the answer as it streams in ---------------------------------------------------------


def chunks_advancing(clock: FakeClock, seconds: float, parts: list[bytes]) -> Iterator[bytes]:
    """A body arriving in `parts`, each `seconds` after the one before (on the rig's clock)."""
    for part in parts:
        clock.advance(seconds)
        yield part


def test_a_png_in_several_chunks_is_joined_whole(rig: Callable[..., Rig]) -> None:
    r = rig([])
    parts = [PNG[:5], PNG[5:9], PNG[9:]]
    r.transport.answers = [httpx.Response(200, content=iter(parts), headers={"content-type": "image/png"})]
    assert r.render() == ChartSuccess(PNG, "acc1")


def test_a_body_that_ends_exactly_at_the_deadline_is_read(rig: Callable[..., Rig]) -> None:
    r = rig([], chart_img_request_timeout_seconds=4.0)
    body = chunks_advancing(r.clock, 2.0, [PNG[:5], PNG[5:]])  # the last byte at 4.0 s: in time
    r.transport.answers = [httpx.Response(200, content=body, headers={"content-type": "image/png"})]
    assert r.render() == ChartSuccess(PNG, "acc1")


def test_a_body_trickling_past_the_deadline_is_a_timeout(rig: Callable[..., Rig]) -> None:
    r = rig([], chart_img_request_timeout_seconds=4.0, chart_img_max_attempts=1)
    body = chunks_advancing(r.clock, 2.5, [PNG[:5], PNG[5:]])
    r.transport.answers = [httpx.Response(200, content=body, headers={"content-type": "image/png"})]
    error = failure(r.render())
    assert (error["details"]["errorKind"], error["details"]["exception"]) == ("timeout", "ReadTimeout")


def test_a_body_past_the_deadline_is_not_read_further(rig: Callable[..., Rig]) -> None:
    """The answer is read as it arrives: once the deadline has passed, the rest of a trickling
    body is not waited for (httpx alone would read it all before handing it over)."""
    r = rig([], chart_img_request_timeout_seconds=4.0, chart_img_max_attempts=1)
    asked: list[bytes] = []

    def body() -> Iterator[bytes]:
        for part in (PNG[:5], PNG[5:9], PNG[9:]):
            asked.append(part)
            r.clock.advance(5.0)  # each part comes after the whole timeout
            yield part

    r.transport.answers = [httpx.Response(200, content=body(), headers={"content-type": "image/png"})]
    assert failure(r.render())["details"]["exception"] == "ReadTimeout"
    assert asked == [PNG[:5]]


def test_a_200_that_is_no_png_and_names_no_type_says_so(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.Response(200, content=b"<html/>")], chart_img_max_attempts=1)
    error = failure(r.render())
    assert error["details"] == {
        "httpStatus": 200,
        "contentType": "",
        "bytes": 7,
        "errorKind": "not_png",
        "attempts": 1,
        "accountIds": ["acc1"],
    }


def test_a_retry_after_date_is_waited_out_on_the_only_key(rig: Callable[..., Rig]) -> None:
    r = rig([])
    date = format_datetime(r.clock.now() + timedelta(seconds=3), usegmt=True)  # 3 s from now
    limited = httpx.Response(429, json={"message": "Too Many Requests"}, headers={"Retry-After": date})
    r.transport.answers = [limited, png()]
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert [s for s in r.clock.sleeps if s] == [pytest.approx(3.0)]


@pytest.mark.parametrize(
    "base_url", ["https://chart-img.test/p", "https://chart-img.test/p/", "https://chart-img.test/p//"]
)
def test_the_client_joins_its_base_url_and_path_without_an_empty_segment(base_url: str) -> None:
    from pydantic import SecretStr

    from worker_chart_export.adapters.chart_img.http import ChartImgClient

    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(204)

    client = ChartImgClient(
        base_url,
        max_connections=1,
        request_timeout=1.0,
        transport=httpx.MockTransport(answer),
        clock=FakeClock(),
    )
    assert client.post_chart({}, SecretStr("k"), timeout=1.0).status == 204
    client.close()
    assert seen == ["https://chart-img.test/p/v2/tradingview/advanced-chart"]
