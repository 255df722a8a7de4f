"""From a template and a step to the CHART-IMG request body (contract §13.3, §14.2), and the
digest that names one body (a PNG is reused only for the very body it was rendered from)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

SYMBOL_PLACEHOLDER = "{symbol}"


def resolve_chart_img_symbol(symbol_template: str, symbol: str) -> str:
    """`BINANCE:{symbol}` + `BTCUSDT` -> `BINANCE:BTCUSDT`."""
    return symbol_template.replace(SYMBOL_PLACEHOLDER, symbol)


def build_request_body(
    template_request: Mapping[str, Any], chart_img_symbol: str, interval: str, default_timezone: str
) -> dict[str, Any]:
    """The template's `request` plus the market parameters, which only the worker sets."""
    body = copy.deepcopy(dict(template_request))
    body.setdefault("timezone", default_timezone)
    body["symbol"] = chart_img_symbol
    body["interval"] = interval
    return body


def body_digest(body: Mapping[str, Any]) -> str:
    """The SHA-256 (64 hex digits) of a request body as sent, in canonical JSON: keys sorted
    at every depth, no spaces, ASCII only. Equal bodies give equal digests whatever their key
    order; any other difference (symbol, interval, timezone, a study, a list's order) gives
    another. The body is `build_request_body`'s, every default filled in; it never holds the
    API key (that travels in a header only)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def requested_size(body: Mapping[str, Any]) -> tuple[int, int]:
    """(width, height) the body asks for: its own, else CHART-IMG's documented defaults."""
    from worker_chart_export.bundled.chart_img_docs import request_bounds

    documented = request_bounds().body
    width, height = body.get("width"), body.get("height")
    return (
        width if isinstance(width, int) else int(documented["width"].default),
        height if isinstance(height, int) else int(documented["height"].default),
    )
