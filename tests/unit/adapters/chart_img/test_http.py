"""The HTTP exchange (adapters/chart_img/http.py) as the chart API makes it: one POST with
the key in its header, the answer's body as JSON or text, a key echoed back redacted.
Over the scripted transport and a FakeClock (scripted.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from harness.chart_img_server import PNG
from unit.adapters.chart_img.scripted import KEYS, Rig, failure, png
from worker_chart_export.core.types import ChartSuccess


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
