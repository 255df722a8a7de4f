"""The HTTP exchange (adapters/chart_img/http.py) as the chart API makes it: one POST with
the key in its header, the answer's body as JSON or text, a key echoed back redacted.
Over the scripted transport and a FakeClock (scripted.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

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


def test_a_key_echoed_in_an_error_body_is_redacted(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.Response(401, json={"message": f"Unknown key {KEYS['acc1']}"})])
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
