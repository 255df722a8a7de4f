"""The `real` and `record` ChartApi adapters (worker contract §13), assembled.

`build_http_chart_api` assembles them from plain values; bootstrap/chart_api.py decides the mode and
passes what the settings say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.chart_img.api import RealChartApi, Seams
from worker_chart_export.adapters.chart_img.http import ChartImgClient
from worker_chart_export.adapters.chart_img.limiter import AccountLimiter
from worker_chart_export.adapters.chart_img.record import RecordChartApi
from worker_chart_export.adapters.chart_img.sessions_config import SessionConfig
from worker_chart_export.adapters.chart_img.tv_sessions import TradingViewSessions
from worker_chart_export.adapters.chart_img.usage_store import UsageStore
from worker_chart_export.adapters.fixtures import FixtureLibrary
from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, AccountLimits
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.limits import LAYOUT_CALL_SECONDS

__all__ = ["ChartImgOptions", "RealChartApi", "RecordChartApi", "Seams", "build_http_chart_api"]


@dataclass(frozen=True)
class ChartImgOptions:
    base_url: str
    request_timeout_seconds: float  # one HTTP call
    max_attempts: int  # per chart, across accounts
    max_connections: int  # every chart the process runs at once: steps at once x chart concurrency
    # an account's pacing and daily limit, unless the account (its plan, or its usage doc) sets them
    daily_limit: int
    rate_per_second: float
    burst: int
    default_plan: str = DEFAULT_PLAN  # the plan of an account that declares none (CHART_IMG_PLAN)
    # a chart CHART-IMG renders, asked of a key about to be disabled for refused requests
    # (None: two refusals disable it, as before)
    known_good_body: Mapping[str, Any] | None = field(default=None, compare=False)
    layout_timeout_seconds: float = LAYOUT_CALL_SECONDS  # one layout chart's HTTP call
    # the TradingView sessions layout charts are sent with (secrets: never compared, never shown)
    sessions: Sequence[SessionConfig] = field(default=(), compare=False, repr=False)


def build_http_chart_api(
    options: ChartImgOptions,
    accounts: Sequence[AccountConfig],
    usage_store: UsageStore,
    *,
    record_into: FixtureLibrary | None = None,
    seams: Seams,
) -> RealChartApi | RecordChartApi:
    """Mode `real`, or `record` into `record_into` when it is given."""
    defaults = AccountLimits(options.daily_limit, options.rate_per_second, options.burst)
    limiter = AccountLimiter(
        accounts, usage_store, defaults=defaults, clock=seams.clock, default_plan=options.default_plan
    )
    client = ChartImgClient(
        options.base_url,
        max_connections=options.max_connections,
        request_timeout=options.request_timeout_seconds,
        transport=seams.transport,
        clock=seams.clock,
    )
    policy = seams.retry_policy or RetryPolicy()
    policy = replace(
        policy,
        backoff=policy.backoff.with_attempts(options.max_attempts),
        # an attempt never needs more than its own timeout
        min_attempt_seconds=min(policy.min_attempt_seconds, options.request_timeout_seconds),
    )
    real = RealChartApi(
        client,
        limiter,
        policy=policy,
        known_good=options.known_good_body,
        sessions=TradingViewSessions(
            options.sessions, accounts, clock=seams.clock, timeout=options.layout_timeout_seconds
        ),
        seams=seams,
    )
    return real if record_into is None else RecordChartApi(record_into, real)
