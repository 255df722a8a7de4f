"""core/templates/chart_request.body_digest: one digest per request body as sent, the identity a PNG
is reused by (core/step/reuse.py)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.naming import symbol_slug
from worker_chart_export.core.templates.chart_request import body_digest, build_request_body

TEMPLATE = {
    "width": 800,
    "height": 600,
    "theme": "dark",
    "studies": [{"name": "Parabolic SAR", "input": {"in_0": 0.02}}, {"name": "Accumulation/Distribution"}],
}


# what build_request_body(TEMPLATE, "BINANCE:BTCUSDT", "1h", "Etc/UTC") sends, written out
SENT = {**TEMPLATE, "timezone": "Etc/UTC", "symbol": "BINANCE:BTCUSDT", "interval": "1h"}
# `printf '%s' "$canonical" | sha256sum` of SENT's canonical JSON, written out:
# {"height":600,"interval":"1h","studies":[{"input":{"in_0":0.02},"name":"Parabolic SAR"},
# {"name":"Accumulation/Distribution"}],"symbol":"BINANCE:BTCUSDT","theme":"dark",
# "timezone":"Etc/UTC","width":800} (the three lines joined)
SENT_DIGEST = "3ddc6102c9623cc899db292d7e57b2220014a3885aeef272ba8a82dd5ef9ffa6"


def body(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy({**SENT, **changes})


def test_the_body_sent_is_the_template_with_its_market_parameters() -> None:
    assert build_request_body(TEMPLATE, "BINANCE:BTCUSDT", "1h", "Etc/UTC") == SENT
    assert body_digest(SENT) == SENT_DIGEST


def test_the_digest_is_the_sha256_of_the_canonical_json_sorted_compact_ascii() -> None:
    sent = {"symbol": "BINANCE:BTCUSDT", "b": [2, 1], "a": {"z": "é", "y": 0.5}}
    canonical = '{"a":{"y":0.5,"z":"\\u00e9"},"b":[2,1],"symbol":"BINANCE:BTCUSDT"}'
    assert body_digest(sent) == hashlib.sha256(canonical.encode("ascii")).hexdigest()
    # 64 lower-case hex digits: `sha256sum` of `canonical`, written out
    assert body_digest(sent) == "d0c8b75cd4202b9ca13f4adb4f4c95b72b0b4d29b3c38e724a7047151f7d361f"


@given(st.permutations(list(body().items())))
def test_key_order_never_changes_the_digest(items: list[tuple[str, Any]]) -> None:
    reordered = dict(items)
    reordered["studies"] = [dict(reversed(list(s.items()))) for s in reordered["studies"]]
    assert body_digest(reordered) == SENT_DIGEST


@pytest.mark.parametrize(
    "changed",
    [
        body(symbol="BINANCE:ETHUSDT"),
        body(interval="4h"),
        body(timezone="Europe/Berlin"),
        body(theme="light"),
        body(width=640),
        body(studies=list(reversed(TEMPLATE["studies"]))),  # the panes' order is the chart's
        body(studies=[{"name": "Parabolic SAR", "input": {"in_0": 0.03}}, TEMPLATE["studies"][1]]),
        body(studies=[{"name": "Volume"}]),
        body(width=800.0 + 0.5),
    ],
)
def test_any_difference_in_what_is_sent_changes_the_digest(changed: dict[str, Any]) -> None:
    assert changed != SENT and body_digest(changed) != SENT_DIGEST


def test_the_digest_is_of_the_body_after_its_defaults_are_filled_in() -> None:
    # a template that leaves the timezone to the worker's default sends what one naming it sends
    named = build_request_body({**TEMPLATE, "timezone": "Etc/UTC"}, "BINANCE:BTCUSDT", "1h", "Europe/Berlin")
    assert body_digest(named) == SENT_DIGEST
    assert body_digest(build_request_body(TEMPLATE, "BINANCE:BTCUSDT", "1h", "Asia/Tokyo")) != SENT_DIGEST


def test_symbols_whose_slugs_collide_have_different_digests() -> None:
    first, second = "BINANCE_US:BTCUSD", "BINANCE:US_BTCUSD"
    assert symbol_slug(first) == symbol_slug(second) == "BINANCE-US-BTCUSD"
    assert body_digest(body(symbol=first)) != body_digest(body(symbol=second))


def test_a_body_that_is_not_json_is_refused_rather_than_digested_loosely() -> None:
    with pytest.raises(ValueError):
        body_digest(body(width=float("nan")))
    with pytest.raises(TypeError):
        body_digest(body(width={1, 2}))


def test_the_digest_of_a_body_is_stable_across_copies() -> None:
    assert body_digest(json.loads(json.dumps(SENT))) == SENT_DIGEST
