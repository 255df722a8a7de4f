"""The chart API a process uses, built from `Settings`: its mode decided once
(`calls_chart_img`), its accounts (the JSON, else the secret), its TradingView sessions (the
JSON, else the secret; each account's session among them), its options, and the known-good
chart a key is asked for before it is disabled. Heavy modules are imported lazily, only for
the mode actually used."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.core.chart_img.account_status import ConfiguredAccount, LimitSource
from worker_chart_export.core.chart_img.plans import AccountLimits
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.environment import CHARTS_API_MODE, CHARTS_FIXTURES_DIR
from worker_chart_export.service.ports import ChartApi
from worker_chart_export.settings import ChartsApiMode, Settings

if TYPE_CHECKING:
    from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig, SecretClient
    from worker_chart_export.adapters.chart_img.assembly import ChartImgOptions, Seams
    from worker_chart_export.adapters.chart_img.sessions_config import SessionConfig
    from worker_chart_export.adapters.chart_img.usage_store import UsageStore


def chart_img_accounts(settings: Settings) -> tuple[AccountConfig, ...]:
    """The accounts the chart API calls: required in real and record mode, none in mock."""
    return _require_accounts(settings) if calls_chart_img(settings) else ()


def calls_chart_img(settings: Settings) -> bool:
    """real and record call CHART-IMG (accounts, usage store, HTTP); mock reads fixtures only."""
    return settings.charts_api_mode is not ChartsApiMode.MOCK


def build_chart_api(
    settings: Settings,
    usage_store: UsageStore | None,
    *,
    seams: Seams,
    secret_client: SecretClient | None = None,
    steps_at_once: int | None = None,
    accounts: Sequence[AccountConfig] | None = None,
) -> ChartApi:
    """The ChartApi for settings.charts_api_mode: the one place the mode is decided.
    Real and record need accounts (`accounts`, else read from the settings) and a usage
    store; mock needs neither (nor `seams`: the clock, the HTTP transport). `steps_at_once`:
    how many steps share it at once (default the served instance's threads)."""
    library = FixtureLibrary(settings.charts_fixtures_dir)
    if not calls_chart_img(settings):
        # a wrong folder would fail every chart as "missing" (record mode creates its folder)
        require_dir(settings.charts_fixtures_dir, CHARTS_FIXTURES_DIR)
        return MockChartApi(library)
    from worker_chart_export.adapters.chart_img.assembly import build_http_chart_api

    if accounts is None:
        accounts = _require_accounts(settings, secret_client)
    if usage_store is None:
        raise ConfigError(CHARTS_API_MODE, f"{settings.charts_api_mode.value} mode needs a usage store")
    sessions = tradingview_sessions(settings, accounts, secret_client)
    return build_http_chart_api(
        replace(chart_img_options(settings, steps_at_once=steps_at_once), sessions=sessions),
        accounts,
        usage_store,
        record_into=library if settings.charts_api_mode is ChartsApiMode.RECORD else None,
        seams=seams,
    )


def tradingview_sessions(
    settings: Settings, accounts: Sequence[AccountConfig], secret_client: SecretClient | None = None
) -> tuple[SessionConfig, ...]:
    """The TradingView sessions (CHART_IMG_SESSIONS_JSON, else CHART_IMG_SESSIONS_SECRET; none
    is none), every account's `session` among them (else a ConfigError naming both ids)."""
    from worker_chart_export.adapters.chart_img.sessions_config import check_account_sessions, load_sessions
    from worker_chart_export.environment import CHART_IMG_ACCOUNTS_JSON, CHART_IMG_ACCOUNTS_SECRET

    sessions = load_sessions(
        settings.chart_img_sessions_json,
        settings.chart_img_sessions_secret,
        settings.google_cloud_project,
        secret_client=secret_client,
    )
    # the accounts came from the JSON when it is set, else from the secret (_require_accounts)
    source = CHART_IMG_ACCOUNTS_JSON if settings.chart_img_accounts_json else CHART_IMG_ACCOUNTS_SECRET
    check_account_sessions(accounts, sessions, accounts_setting=source)
    return sessions


def chart_img_options(settings: Settings, *, steps_at_once: int | None = None) -> ChartImgOptions:
    """What the HTTP chart API is built from. Its connections: one for every chart the
    process runs at once, i.e. steps at once (the instance's threads) x CHART_CONCURRENCY."""
    from worker_chart_export.adapters.chart_img.assembly import ChartImgOptions

    steps = settings.threads if steps_at_once is None else steps_at_once
    return ChartImgOptions(
        base_url=settings.chart_img_base_url,
        request_timeout_seconds=settings.chart_img_request_timeout_seconds,
        max_attempts=settings.chart_img_max_attempts,
        max_connections=steps * settings.chart_concurrency,
        daily_limit=settings.chart_img_daily_limit,
        rate_per_second=settings.chart_img_rate_per_second,
        burst=settings.chart_img_burst,
        default_plan=settings.chart_img_plan,
        known_good_body=known_good_body(settings),
        layout_timeout_seconds=settings.chart_img_layout_timeout_seconds,
    )


# The bundled sample's chart (the demo renders it): a key is disabled for refused requests only
# when CHART-IMG refuses it this one too.
KNOWN_GOOD_TEMPLATE, KNOWN_GOOD_SYMBOL, KNOWN_GOOD_INTERVAL = "price_psar_adi_v1", "BTCUSDT", "1h"


def known_good_body(settings: Settings) -> dict[str, Any]:
    from worker_chart_export import bundled
    from worker_chart_export.core.templates.chart_request import build_request_body, resolve_chart_img_symbol

    path = bundled.chart_templates_dir() / f"{KNOWN_GOOD_TEMPLATE}.json"
    template = json.loads(path.read_text(encoding="utf-8"))
    symbol = resolve_chart_img_symbol(template["chartImgSymbolTemplate"], KNOWN_GOOD_SYMBOL)
    return build_request_body(
        template["request"], symbol, KNOWN_GOOD_INTERVAL, settings.charts_default_timezone
    )


def _require_accounts(
    settings: Settings, secret_client: SecretClient | None = None
) -> tuple[AccountConfig, ...]:
    from worker_chart_export.adapters.chart_img.accounts_config import require_accounts

    return require_accounts(
        settings.chart_img_accounts_json,
        settings.chart_img_accounts_secret,
        settings.google_cloud_project,
        secret_client=secret_client,
    )


def account_defaults(settings: Settings) -> AccountLimits:
    """The limits of an account that sets none itself (no plan, no own values)."""
    options = chart_img_options(settings)
    return AccountLimits(options.daily_limit, options.rate_per_second, options.burst)


def configured_accounts(
    settings: Settings, secret_client: SecretClient | None = None
) -> tuple[ConfiguredAccount, ...]:
    """The accounts the worker would use (same sources: CHART_IMG_ACCOUNTS_JSON, else the
    secret), as `accounts` shows them: plan, limits and the pacing the worker sends at,
    never the key. () when none is configured."""
    from worker_chart_export.adapters.chart_img.account_view import PacingMargins
    from worker_chart_export.adapters.chart_img.accounts_config import load_accounts

    loaded = load_accounts(
        settings.chart_img_accounts_json,
        settings.chart_img_accounts_secret,
        settings.google_cloud_project,
        secret_client=secret_client,
    )
    defaults, margins = account_defaults(settings), PacingMargins()
    configured = []
    for account in loaded:
        limits = account.limits(defaults)
        source = _limit_source(account.daily_limit, account.plan)
        configured.append(ConfiguredAccount(account.id, account.plan, limits, source, margins.pacing(limits)))
    return tuple(configured)


def _limit_source(own_limit: int | None, plan: str | None) -> LimitSource:
    """As AccountConfig.limits decides: the account's own value, else its plan's, else the default."""
    if own_limit is not None:
        return LimitSource.ACCOUNT
    return LimitSource.PLAN if plan is not None else LimitSource.DEFAULT


def require_dir(path: Path, setting: str) -> None:
    if not path.is_dir():
        raise ConfigError(setting, f"{path} is not a folder")
