"""The typed configuration (`Settings`, read from the environment by pydantic-settings) and
`load_settings`, which adds the flags. Only `bootstrap` and the edges (CLI, serve) read
Settings: the rest of the worker takes plain values (`core.limits.StepLimits`, adapter
arguments).

Each field is read from one variable, its alias (the names are in environment.py), spelled
exactly so; an empty variable counts as unset. Flags (by field name) win over the
environment, the environment over a caller's own defaults (`RunLocalSettings`), those over
the defaults here. No `.env` file and no secrets folder are read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from worker_chart_export import bundled
from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, plan_named
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.problem_words import plain_problem
from worker_chart_export.core.retry import CHART_ATTEMPTS, STEP_ATTEMPTS, Backoff
from worker_chart_export.core.step.reuse import DEFAULT_MAX_AGE_SECONDS, MAX_AGE_LIMIT_SECONDS
from worker_chart_export.environment import (
    APP_ENV,
    CHART_CONCURRENCY,
    CHART_IMG_ACCOUNTS_JSON,
    CHART_IMG_ACCOUNTS_SECRET,
    CHART_IMG_BASE_URL,
    CHART_IMG_BURST,
    CHART_IMG_DAILY_LIMIT,
    CHART_IMG_MAX_ATTEMPTS,
    CHART_IMG_PLAN,
    CHART_IMG_RATE_PER_SECOND,
    CHART_IMG_REQUEST_TIMEOUT_SECONDS,
    CHART_REUSE_MAX_AGE_SECONDS,
    CHART_TEMPLATES_DIR,
    CHARTS_API_MODE,
    CHARTS_BUCKET,
    CHARTS_DEFAULT_TIMEZONE,
    CHARTS_FIXTURES_DIR,
    CHARTS_LOCAL_OUTPUT_DIR,
    FINALIZE_BUDGET_SECONDS,
    FIRESTORE_EMULATOR_HOST,
    GOOGLE_CLOUD_PROJECT,
    PORT,
    REQUEST_TIMEOUT_SECONDS,
    STEP_MAX_ATTEMPTS,
    STEP_RETRY_BASE_SECONDS,
    STEP_RETRY_MAX_SECONDS,
    THREADS,
)

DEFAULT_BUCKET = "worker-chart-export-local"
# GCS bucket naming rules (dotted names may be longer, up to 222 characters)
BUCKET_NAME = re.compile(r"^(?=.{3,222}$)[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$")


class ChartsApiMode(StrEnum):
    REAL = "real"
    MOCK = "mock"
    RECORD = "record"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        case_sensitive=True,  # CHARTS_BUCKET, never charts_bucket
        env_ignore_empty=True,  # `VAR=` means unset, as before pydantic-settings
        validate_by_name=True,  # flags and tests give fields by name
        validate_by_alias=True,
    )

    env: str = Field("local", validation_alias=APP_ENV)  # shows up as `env` on every log line
    charts_api_mode: ChartsApiMode = Field(ChartsApiMode.REAL, validation_alias=CHARTS_API_MODE)
    charts_bucket: str = Field(DEFAULT_BUCKET, validation_alias=CHARTS_BUCKET)  # without gs://
    charts_default_timezone: str = Field("Etc/UTC", validation_alias=CHARTS_DEFAULT_TIMEZONE)
    charts_fixtures_dir: Path = Field(
        default_factory=lambda: bundled.fixtures_dir() / "chart-api", validation_alias=CHARTS_FIXTURES_DIR
    )
    chart_templates_dir: Path = Field(
        default_factory=bundled.chart_templates_dir, validation_alias=CHART_TEMPLATES_DIR
    )
    chart_img_base_url: str = Field("https://api.chart-img.com", validation_alias=CHART_IMG_BASE_URL)
    chart_img_accounts_json: SecretStr | None = Field(None, validation_alias=CHART_IMG_ACCOUNTS_JSON)
    # Secret Manager version, e.g. projects/p/secrets/chart-img-accounts/versions/latest
    chart_img_accounts_secret: str | None = Field(None, validation_alias=CHART_IMG_ACCOUNTS_SECRET)
    chart_img_daily_limit: int = Field(44, ge=1, validation_alias=CHART_IMG_DAILY_LIMIT)
    # The accounts' smallest CHART-IMG plan: the resolution and parameter limits templates
    # are checked against (an account's own `plan` sets its quota and pacing, not this).
    chart_img_plan: str = Field(DEFAULT_PLAN, validation_alias=CHART_IMG_PLAN)
    chart_img_rate_per_second: float = Field(1.0, gt=0, validation_alias=CHART_IMG_RATE_PER_SECOND)
    chart_img_burst: int = Field(3, ge=1, validation_alias=CHART_IMG_BURST)
    chart_img_request_timeout_seconds: float = Field(
        45.0, gt=0, validation_alias=CHART_IMG_REQUEST_TIMEOUT_SECONDS
    )
    # a chart's HTTP attempts across accounts, spaced by core.retry.CHART_ATTEMPTS' backoff
    chart_img_max_attempts: int = Field(
        CHART_ATTEMPTS.attempts or 1, ge=1, le=10, validation_alias=CHART_IMG_MAX_ATTEMPTS
    )
    chart_concurrency: int = Field(8, ge=1, le=64, validation_alias=CHART_CONCURRENCY)
    # A retried step lists the PNGs an earlier execution wrote this long ago at most and
    # uses them instead of asking CHART-IMG again (core/step/reuse.py); 0 turns that off.
    chart_reuse_max_age_seconds: float = Field(
        DEFAULT_MAX_AGE_SECONDS, ge=0, le=MAX_AGE_LIMIT_SECONDS, validation_alias=CHART_REUSE_MAX_AGE_SECONDS
    )
    # Steps one served instance runs at once: functions-framework's gunicorn threads, which
    # it takes from THREADS (deploy.sh sets it to Cloud Run's concurrency), else 4 per CPU.
    # The CHART-IMG connection pool holds threads x chart_concurrency.
    threads: int = Field(
        default_factory=lambda: 4 * (os.cpu_count() or 1), ge=1, le=1000, validation_alias=THREADS
    )
    # Cloud Run request timeout; the step's budget is this minus the finalize reserve.
    request_timeout_seconds: float = Field(300.0, gt=0, validation_alias=REQUEST_TIMEOUT_SECONDS)
    finalize_budget_seconds: float = Field(30.0, gt=0, validation_alias=FINALIZE_BUDGET_SECONDS)
    google_cloud_project: str | None = Field(None, validation_alias=GOOGLE_CLOUD_PROJECT)
    firestore_emulator_host: str | None = Field(None, validation_alias=FIRESTORE_EMULATOR_HOST)
    local_output_dir: Path = Field(Path("out"), validation_alias=CHARTS_LOCAL_OUTPUT_DIR)
    port: int = Field(8080, ge=1, le=65535, validation_alias=PORT)
    # A step's attempts in all (core.retry.STEP_ATTEMPTS): one held back by a bad window waits
    # while attempt < this, STEP_RETRY_BASE_SECONDS doubling up to STEP_RETRY_MAX_SECONDS, and
    # the reaper makes an expired step READY again while attempt < this, else FAILED.
    step_max_attempts: int = Field(
        STEP_ATTEMPTS.attempts or 1, ge=1, le=100, validation_alias=STEP_MAX_ATTEMPTS
    )
    step_retry_base_seconds: float = Field(STEP_ATTEMPTS.base, gt=0, validation_alias=STEP_RETRY_BASE_SECONDS)
    step_retry_max_seconds: float = Field(STEP_ATTEMPTS.cap, gt=0, validation_alias=STEP_RETRY_MAX_SECONDS)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The flags, then the environment; no .env file, no secrets folder. validate_by_name
        # would also make the environment source read a field's name (charts_bucket) as a
        # variable: it reads through _Variables, the same fields by their aliases only.
        return init_settings, EnvSettingsSource(_Variables)

    @property
    def charts_bucket_configured(self) -> bool:
        """False when charts_bucket is only the default (run-local then writes locally)."""
        return "charts_bucket" in self.model_fields_set

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

    @field_validator("charts_default_timezone")
    @classmethod
    def _documented_timezone(cls, value: str) -> str:
        # sent with every template that sets none: one CHART-IMG refuses would cost each a unit
        from worker_chart_export.bundled.chart_img_docs import timezones

        if value not in timezones():
            raise ValueError(f"{value!r} is not in CHART-IMG's Supported Timezone table (e.g. Etc/UTC)")
        return value

    @field_validator("finalize_budget_seconds")
    @classmethod
    def _below_the_request_timeout(cls, value: float, info: ValidationInfo) -> float:
        # as deploy.sh refuses it: the step's budget would be nothing, every step failing
        # with no call made (the request timeout is validated first, being declared first)
        timeout = info.data.get("request_timeout_seconds")
        if timeout is not None and value >= timeout:
            raise ValueError(
                f"must be below {REQUEST_TIMEOUT_SECONDS} ({timeout:g}): the step's budget is the "
                "request timeout minus this"
            )
        return value

    @field_validator("step_retry_max_seconds")
    @classmethod
    def _not_below_the_base(cls, value: float, info: ValidationInfo) -> float:
        base = info.data.get("step_retry_base_seconds")
        if base is not None and value < base:
            raise ValueError(f"must be at least {STEP_RETRY_BASE_SECONDS} ({base:g}): the waits grow from it")
        return value

    @property
    def step_retries(self) -> Backoff:
        """The step's own attempts after a bad window, as these settings say."""
        return replace(
            STEP_ATTEMPTS,
            attempts=self.step_max_attempts,
            base=self.step_retry_base_seconds,
            cap=self.step_retry_max_seconds,
        )

    @field_validator("chart_img_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value, re.ASCII):
            raise ValueError(f"expected an http(s) URL like https://api.chart-img.com, got {value!r}")
        return value.rstrip("/")


class _Variables(Settings):
    """Settings' fields as the environment names them: by alias (the variable) only."""

    model_config = SettingsConfigDict(validate_by_name=False)


class RunLocalSettings(Settings):
    """run-local's own defaults, under the environment's: mock charts (fixtures, no accounts)."""

    charts_api_mode: ChartsApiMode = Field(ChartsApiMode.MOCK, validation_alias=CHARTS_API_MODE)


def load_settings(flags: Mapping[str, Any] | None = None, *, kind: type[Settings] = Settings) -> Settings:
    """`kind` (Settings, or a caller's defaults such as RunLocalSettings) from `flags` (by
    field name; None means "not given") over the environment.

    Raises ConfigError naming the environment variable of the first bad setting, never its
    value (the accounts JSON holds keys); an edge that took the value from a flag renders
    the flag instead (`ConfigError.render`).
    """
    given = {name: value for name, value in (flags or {}).items() if value is not None}
    try:
        return kind(**given)
    except ValidationError as exc:
        raise _config_error(exc, kind) from None


def _config_error(exc: ValidationError, kind: type[Settings]) -> ConfigError:
    """The first problem by its variable (a value from the environment is located by its
    alias, one from a flag by its field's name), and the others after it; the problem in
    our words (core.problem_words), never the input."""
    variables = {name: str(field.validation_alias) for name, field in kind.model_fields.items()}
    problems = []
    for err in exc.errors():
        where = str(err["loc"][0]) if err["loc"] else "settings"
        problems.append((variables.get(where, where), plain_problem(err)))
    setting, first = problems[0]
    rest = "".join(f"; {var}: {msg}" for var, msg in problems[1:])
    return ConfigError(setting, first + rest)
