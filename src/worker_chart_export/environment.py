"""The environment variables the worker reads: each name defined once, here.

A leaf module (stdlib only): the CloudEvent entry's no-op path imports it for the log
identity, and must not pay for pydantic. `settings.Settings` reads each of its fields from
one of these names (the field's alias); errors about a setting carry the variable's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from worker_chart_export import SERVICE_NAME

APP_ENV = "APP_ENV"
CHARTS_API_MODE = "CHARTS_API_MODE"
CHARTS_BUCKET = "CHARTS_BUCKET"
CHARTS_DEFAULT_TIMEZONE = "CHARTS_DEFAULT_TIMEZONE"
CHARTS_FIXTURES_DIR = "CHARTS_FIXTURES_DIR"
CHART_TEMPLATES_DIR = "CHART_TEMPLATES_DIR"
CHART_IMG_BASE_URL = "CHART_IMG_BASE_URL"
CHART_IMG_ACCOUNTS_JSON = "CHART_IMG_ACCOUNTS_JSON"
CHART_IMG_ACCOUNTS_SECRET = "CHART_IMG_ACCOUNTS_SECRET"
CHART_IMG_DAILY_LIMIT = "CHART_IMG_DAILY_LIMIT"
CHART_IMG_PLAN = "CHART_IMG_PLAN"
CHART_IMG_RATE_PER_SECOND = "CHART_IMG_RATE_PER_SECOND"
CHART_IMG_BURST = "CHART_IMG_BURST"
CHART_IMG_REQUEST_TIMEOUT_SECONDS = "CHART_IMG_REQUEST_TIMEOUT_SECONDS"
CHART_IMG_MAX_ATTEMPTS = "CHART_IMG_MAX_ATTEMPTS"
CHART_CONCURRENCY = "CHART_CONCURRENCY"
CHART_REUSE_MAX_AGE_SECONDS = "CHART_REUSE_MAX_AGE_SECONDS"
REQUEST_TIMEOUT_SECONDS = "REQUEST_TIMEOUT_SECONDS"
FINALIZE_BUDGET_SECONDS = "FINALIZE_BUDGET_SECONDS"
GOOGLE_CLOUD_PROJECT = "GOOGLE_CLOUD_PROJECT"
FIRESTORE_EMULATOR_HOST = "FIRESTORE_EMULATOR_HOST"
CHARTS_LOCAL_OUTPUT_DIR = "CHARTS_LOCAL_OUTPUT_DIR"
PORT = "PORT"
STEP_MAX_ATTEMPTS = "STEP_MAX_ATTEMPTS"
STEP_RETRY_BASE_SECONDS = "STEP_RETRY_BASE_SECONDS"
STEP_RETRY_MAX_SECONDS = "STEP_RETRY_MAX_SECONDS"
THREADS = "THREADS"  # functions-framework's gunicorn threads: events served at once


def log_identity(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(service, env) for log lines, without building the full Settings."""
    source = os.environ if environ is None else environ
    return SERVICE_NAME, source.get(APP_ENV) or "local"
