"""The typed configuration (`Settings`) and `load_settings`, its one builder from flags,
environment and defaults. Only `bootstrap` and the edges (CLI, serve) read Settings: the
rest of the worker takes plain values (`core.limits.StepLimits`, adapter arguments).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from worker_chart_export import bundled
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.plans import DEFAULT_PLAN, plan_named
from worker_chart_export.environment import ENV_VARS

DEFAULT_BUCKET = "worker-chart-export-local"
# GCS bucket naming rules (dotted names may be longer, up to 222 characters)
BUCKET_NAME = re.compile(r"^(?=.{3,222}$)[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$")


class ChartsApiMode(StrEnum):
    REAL = "real"
    MOCK = "mock"
    RECORD = "record"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str = "local"  # APP_ENV: shows up as `env` on every log line
    charts_api_mode: ChartsApiMode = ChartsApiMode.REAL
    charts_bucket: str = DEFAULT_BUCKET  # bucket name, without gs://
    charts_bucket_configured: bool = False  # False when charts_bucket is only the default
    charts_default_timezone: str = "Etc/UTC"
    charts_fixtures_dir: Path = Field(default_factory=lambda: bundled.fixtures_dir() / "chart-api")
    chart_templates_dir: Path = Field(default_factory=bundled.chart_templates_dir)
    chart_img_base_url: str = "https://api.chart-img.com"
    chart_img_accounts_json: SecretStr | None = None
    # Secret Manager version, e.g. projects/p/secrets/chart-img-accounts/versions/latest
    chart_img_accounts_secret: str | None = None
    chart_img_daily_limit: int = Field(default=44, ge=1)
    # The accounts' smallest CHART-IMG plan: the resolution and parameter limits templates
    # are checked against (an account's own `plan` sets its quota and pacing, not this).
    chart_img_plan: str = DEFAULT_PLAN
    chart_img_rate_per_second: float = Field(default=1.0, gt=0)
    chart_img_burst: int = Field(default=3, ge=1)
    chart_img_request_timeout_seconds: float = Field(default=45.0, gt=0)
    chart_img_max_attempts: int = Field(default=3, ge=1, le=10)
    chart_concurrency: int = Field(default=8, ge=1, le=64)
    # Steps one served instance runs at once: functions-framework's gunicorn threads, which
    # it takes from THREADS (deploy.sh sets it to Cloud Run's concurrency), else 4 per CPU.
    # The CHART-IMG connection pool holds threads x chart_concurrency.
    threads: int = Field(default_factory=lambda: 4 * (os.cpu_count() or 1), ge=1, le=1000)
    # Cloud Run request timeout; the step's budget is this minus the finalize reserve.
    request_timeout_seconds: float = Field(default=300.0, gt=0)
    finalize_budget_seconds: float = Field(default=30.0, gt=0)
    google_cloud_project: str | None = None
    firestore_emulator_host: str | None = None
    local_output_dir: Path = Path("out")
    port: int = 8080
    # the reaper: a step whose lease expired goes back to READY while attempt < this, else FAILED
    reaper_max_attempts: int = Field(default=3, ge=1, le=100)

    @field_validator("charts_bucket")
    @classmethod
    def _strip_scheme(cls, value: str) -> str:
        bucket = value.removeprefix("gs://").strip("/")
        if not BUCKET_NAME.fullmatch(bucket):
            raise ValueError(
                f"expected a GCS bucket name or gs://<bucket> (3-63 characters, up to 222 with dots: "
                f"lowercase letters, digits, '-', '_', '.'; first and last a letter or digit), got {value!r}"
            )
        return bucket

    @field_validator("chart_img_plan")
    @classmethod
    def _known_plan(cls, value: str) -> str:
        return plan_named(value.strip()).name  # ValueError names the known plans

    @field_validator("chart_img_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http(s) URL like https://api.chart-img.com, got {value!r}")
        return value.rstrip("/")


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> Settings:
    """Flags (overrides, by field name; None means "not given") over env over `defaults`
    (a caller's own defaults, e.g. run-local's mock mode) over the Settings defaults.

    Raises ConfigError naming the environment variable of the first bad setting; an edge
    that took the value from a flag renders the flag instead (`ConfigError.render`).
    """
    source = os.environ if environ is None else environ
    from_env = {field_name: source[var] for field_name, var in ENV_VARS.items() if source.get(var)}
    from_flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    values: dict[str, Any] = {**(defaults or {}), **from_env, **from_flags}
    values["charts_bucket_configured"] = "charts_bucket" in from_env or "charts_bucket" in from_flags
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else "settings"
            # never echo the input: it may be the accounts JSON with keys in it
            problems.append((ENV_VARS.get(name, name), err["msg"]))
        setting, first = problems[0]
        rest = "".join(f"; {var}: {msg}" for var, msg in problems[1:])
        raise ConfigError(setting, first + rest) from None
