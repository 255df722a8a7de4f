"""CHART-IMG's Snapshot v2 Shared Layout as documented (contracts/chart-img/layout_bounds.json):
its path, the session headers, the minimum timeout the docs ask for, and its body's parameters,
read once per process through chart_img_docs' reader (frozen values, no network)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from worker_chart_export.bundled.chart_img_docs import LAYOUT_BOUNDS, Parameter, document, parameters


@dataclass(frozen=True)
class LayoutBounds:
    """Snapshot v2 Shared Layout: `POST <path>` with the layout's id in place of LAYOUT_ID."""

    path: str  # /v2/tradingview/layout-chart/<LAYOUT_ID>
    layout_id_examples: tuple[str, ...]  # the docs give no grammar, only these
    minimum_timeout_seconds: int  # "Please set the minimum timeout to 60 seconds ..."
    session_headers: tuple[str, str]  # tradingview-session-id, tradingview-session-id-sign
    sessions: str  # when both are needed, in the docs' words
    body: Mapping[str, Parameter]  # symbol, interval, width, ..., watermarkOpacity

    def path_for(self, layout_id: str) -> str:
        return self.path.replace("<LAYOUT_ID>", layout_id)


@cache
def layout_bounds() -> LayoutBounds:
    data = document(LAYOUT_BOUNDS)
    session_headers = tuple(name for name in data["headers"] if name.startswith("tradingview-"))
    if len(session_headers) != 2:
        raise ValueError(f"{LAYOUT_BOUNDS}: expected two tradingview-* headers, found {session_headers}")
    return LayoutBounds(
        path=data["path"],
        layout_id_examples=data["layoutId"]["examples"],
        minimum_timeout_seconds=data["minimumTimeoutSeconds"],
        session_headers=(session_headers[0], session_headers[1]),
        sessions=data["sessions"],
        body=parameters(data["body"]),
    )
