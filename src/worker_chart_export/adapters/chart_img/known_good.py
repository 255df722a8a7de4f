"""A key about to be disabled for requests CHART-IMG refused (two different ones, no success
between: core/chart_img/key_history.py) is first asked for a chart CHART-IMG renders, the
bundled sample's: rendered, the requests were at fault and the key stays in service; refused
too, the key is. Only the key at fault is set aside (docs/design.md, "CHART-IMG answers")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.http import NEVER_LEFT, HttpAnswer
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import Disposition, classify
from worker_chart_export.logs import get_logger

if TYPE_CHECKING:
    from worker_chart_export.adapters.chart_img.api import RealChartApi

# What an answer to the known-good chart says of the key: it works, it is refused, or nothing.
_VERDICTS = {Disposition.SUCCESS: True, Disposition.BAD_KEY: False}


class KnownGoodChart:
    """The known-good chart asked of one key, over the chart API's own client, limiter and
    connection permits."""

    def __init__(self, api: RealChartApi, body: Mapping[str, Any]) -> None:
        self._api = api
        self.body = body

    def key_works(self, budget: Budget, account_id: str) -> bool | None:
        """True it renders, False the key is refused for it too, None no verdict (no time, no
        connection, no unit, another answer). It costs a unit, as any chart does; one that
        never left, or a 429, is given back."""
        api = self._api
        max_wait = budget.remaining() - api.policy.min_attempt_seconds
        if max_wait < 0 or not api.client.permits.acquire(timeout=max_wait):
            return None
        try:
            answer = self._ask(budget, account_id, max_wait)
        finally:
            api.client.permits.release()
        if answer is None:
            return None
        works = _VERDICTS.get(classify(answer.status, None if answer.status == 200 else answer.body))
        if works:
            api.limiter.succeeded(account_id)
        get_logger().info(
            "chart-img key checked with a known-good chart",
            accountId=account_id,
            httpStatus=answer.status,
            keyWorks=works,
        )
        return works

    def _ask(self, budget: Budget, account_id: str, max_wait: float) -> HttpAnswer | None:
        api = self._api
        lease = api.limiter.reserve_on(account_id, max_wait=max_wait)
        if lease is None:
            return None
        lease = api.limiter.wait_for_slot(lease)
        timeout = min(api.client.request_timeout, budget.remaining())
        try:
            answer = api.client.post_chart(self.body, lease.api_key, timeout=timeout)
        except httpx.HTTPError as exc:
            if isinstance(exc, NEVER_LEFT):
                api.limiter.give_back(lease)
            return None
        if answer.status == 429:
            api.limiter.give_back(lease)
        return answer if answer.status == 200 else answer.redacted(known_keys.redaction())
