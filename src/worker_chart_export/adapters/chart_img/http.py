"""The HTTP exchange with CHART-IMG: one POST, held to a deadline, its answer kept as bytes.

The path is the Advanced Chart's, or the Shared Layout's with the layout's id as its last
segment (checked here again: only ASCII letters and digits ever reach the URL). The key goes
into the `x-api-key` header and nowhere else, a TradingView session into the two
`tradingview-session-*` headers and nowhere else; an answer that is not a chart is redacted
(`HttpAnswer.redacted`) before anything reads it, so CHART-IMG's words carry no form of any
key or session the process holds into a log line, a step error, a usage reason or a manifest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from pydantic import SecretStr

from worker_chart_export.adapters.chart_img.permits import ConnectionPermits
from worker_chart_export.adapters.chart_img.sessions_config import SessionConfig
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.redaction import Redaction
from worker_chart_export.core.templates.template_rules import LAYOUT_ID

ADVANCED_CHART_PATH = "/v2/tradingview/advanced-chart"
LAYOUT_CHART_PATH = "/v2/tradingview/layout-chart/"  # + <LAYOUT_ID> (layout_bounds.json's path)
# Shared Layout's request headers for a private layout or invite-only indicators: a browser's
# `sessionid` and `sessionid_sign` cookies (layout_bounds.json)
SESSION_HEADERS = ("tradingview-session-id", "tradingview-session-id-sign")
# Failures before a connection existed: nothing was sent, so CHART-IMG cannot have counted
# the call (refused, DNS, connect timeout, TLS handshake; or no pooled connection at all).
# A read timeout, a reset or a write error may come after the request left: its unit stays.
NEVER_LEFT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class HttpAnswer:
    """What CHART-IMG sent back: status, raw bytes, and for errors the body as JSON or text."""

    status: int
    content: bytes
    content_type: str
    retry_after: float | None = None  # seconds, from a Retry-After header

    def redacted(self, redaction: Redaction) -> HttpAnswer:
        """Defensive: an error page that echoed a key, in any form, must not carry it further."""
        content = redaction.content(self.content)
        return self if content is self.content else replace(self, content=content)

    @property
    def body(self) -> Any:
        text = self.content.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text


def chart_path(layout_id: str | None) -> str:
    """The Advanced Chart's path, or the Shared Layout's for `layout_id`; ValueError for an id
    that is not ASCII letters and digits (never interpolated unchecked)."""
    if layout_id is None:
        return ADVANCED_CHART_PATH
    if not LAYOUT_ID.fullmatch(layout_id):
        raise ValueError(f"{layout_id!r} is not a TradingView layout id: not sent")
    return LAYOUT_CHART_PATH + layout_id


def parse_retry_after(value: str | None, clock: Clock) -> float | None:
    """Retry-After as seconds (RFC 9110: delay-seconds or an HTTP-date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # delay-seconds is ASCII digits only
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, (moment - clock.now()).total_seconds())


class ChartImgClient:
    """One httpx.Client per process, reused: its pool holds `max_connections`, one for every
    chart the instance runs at once, and `permits` hands them out (one per attempt, taken
    before the attempt reserves quota: see permits.py)."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        request_timeout: float,
        transport: httpx.BaseTransport | None = None,
        clock: Clock,
    ) -> None:
        # an Advanced Chart call's own timeout (CHART_IMG_REQUEST_TIMEOUT_SECONDS), as an httpx
        # client carries its default; a layout call has its own (TradingViewSessions.timeout)
        self.request_timeout = request_timeout
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), transport=transport, limits=limits, follow_redirects=False
        )
        self._clock = clock
        self.permits = ConnectionPermits(max_connections)

    def post_chart(
        self,
        body: Mapping[str, Any],
        api_key: SecretStr,
        *,
        timeout: float,
        layout_id: str | None = None,
        session: SessionConfig | None = None,
    ) -> HttpAnswer:
        """POST the chart request (a layout chart's with `layout_id`, sent with `session`'s
        headers when given); raises httpx.TimeoutException / httpx.TransportError.
        The caller holds one of `permits`, so a pooled connection is free: no pool wait.

        httpx timeouts are per phase (connect, each read...), so the body is streamed and
        the whole exchange is also held to `timeout`: a server that trickles bytes cannot
        keep us past the budget.
        """
        headers = {"x-api-key": api_key.get_secret_value()}
        if session is not None:
            headers.update(zip(SESSION_HEADERS, session.secrets(), strict=True))
        request = self._client.build_request(
            "POST",
            chart_path(layout_id),
            json=dict(body),
            headers=headers,
            timeout=httpx.Timeout(timeout),
        )
        deadline = self._clock.monotonic() + timeout
        response = self._client.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if self._clock.monotonic() > deadline:
                    raise httpx.ReadTimeout("response not complete within the time left", request=request)
            content_type = response.headers.get("content-type", "")
            retry_after = parse_retry_after(response.headers.get("retry-after"), self._clock)
            return HttpAnswer(response.status_code, b"".join(chunks), content_type, retry_after)
        finally:
            response.close()

    def close(self) -> None:
        self._client.close()
