"""The one place that reads the environment.

Kept free of heavy imports: the CloudEvent entry reads the log identity from here on its
no-op path, and pydantic (the typed `config.Settings`) is imported only when a step runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.core.errors import ConfigError

if TYPE_CHECKING:
    from worker_chart_export.config import Settings

# env var -> Settings field
ENV_FIELDS: dict[str, str] = {
    "APP_ENV": "env",
    "CHARTS_API_MODE": "charts_api_mode",
    "CHARTS_BUCKET": "charts_bucket",
    "CHARTS_DEFAULT_TIMEZONE": "charts_default_timezone",
    "CHARTS_FIXTURES_DIR": "charts_fixtures_dir",
    "CHART_TEMPLATES_DIR": "chart_templates_dir",
    "CHART_IMG_BASE_URL": "chart_img_base_url",
    "CHART_IMG_ACCOUNTS_JSON": "chart_img_accounts_json",
    "CHART_IMG_ACCOUNTS_SECRET": "chart_img_accounts_secret",
    "CHART_IMG_DAILY_LIMIT": "chart_img_daily_limit",
    "CHART_IMG_RATE_PER_SECOND": "chart_img_rate_per_second",
    "CHART_IMG_BURST": "chart_img_burst",
    "CHART_IMG_REQUEST_TIMEOUT_SECONDS": "chart_img_request_timeout_seconds",
    "CHART_IMG_MAX_ATTEMPTS": "chart_img_max_attempts",
    "CHART_CONCURRENCY": "chart_concurrency",
    "REQUEST_TIMEOUT_SECONDS": "request_timeout_seconds",
    "FINALIZE_BUDGET_SECONDS": "finalize_budget_seconds",
    "GOOGLE_CLOUD_PROJECT": "google_cloud_project",
    "FIRESTORE_EMULATOR_HOST": "firestore_emulator_host",
    "CHARTS_LOCAL_OUTPUT_DIR": "local_output_dir",
    "PORT": "port",
}


def log_identity(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(service, env) for log lines, without building the full Settings."""
    source = os.environ if environ is None else environ
    return SERVICE_NAME, source.get("APP_ENV") or "local"


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> Settings:
    """Flags (overrides, by field name; None means "not given") over env over `defaults`
    (a caller's own defaults, e.g. run-local's mock mode) over the Settings defaults."""
    from pydantic import ValidationError

    from worker_chart_export.config import Settings

    source = os.environ if environ is None else environ
    from_env = {field_name: source[var] for var, field_name in ENV_FIELDS.items() if source.get(var)}
    from_flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {**(defaults or {}), **from_env, **from_flags}
    values["charts_bucket_configured"] = "charts_bucket" in from_env or "charts_bucket" in from_flags
    try:
        return Settings(**values)
    except ValidationError as exc:
        env_names = {field_name: var for var, field_name in ENV_FIELDS.items()}
        problems = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else "settings"
            # never echo the input: it may be the accounts JSON with keys in it
            problems.append((env_names.get(name, name), err["msg"]))
        setting, first = problems[0]
        rest = "".join(f"; {var}: {msg}" for var, msg in problems[1:])
        raise ConfigError(setting, first + rest) from None
