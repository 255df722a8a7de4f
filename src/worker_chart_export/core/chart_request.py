"""From a template and a step to the CHART-IMG request body (contract §13.3, §14.2)."""

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


def request_digest(body: Mapping[str, Any]) -> str:
    """What identifies a request to CHART-IMG: the SHA-256 of its body as canonical JSON
    (sorted keys, no spaces), in hex. Two charts whose bodies are equal are one request."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
