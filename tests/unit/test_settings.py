"""Settings from the environment (pydantic-settings): the exact variable names, empty as
unset, flags over env over a caller's defaults over Settings', errors that name the variable
and never echo the value."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.settings import ChartsApiMode, RunLocalSettings, Settings, load_settings

CONFIGURATION_DOC = Path(__file__).parents[2] / "docs" / "configuration.md"
Environment = Callable[..., None]


def test_each_field_is_read_from_its_variable_spelled_exactly(settings_environment: Environment) -> None:
    settings_environment(APP_ENV="prod", CHARTS_LOCAL_OUTPUT_DIR="/tmp/o", CHART_IMG_DAILY_LIMIT="7")
    settings = load_settings()
    assert (settings.env, settings.local_output_dir, settings.chart_img_daily_limit) == (
        "prod",
        Path("/tmp/o"),
        7,
    )
    settings_environment(app_env="prod", charts_bucket="lower-case", chart_img_daily_limit="7")
    lower = load_settings()  # the field names are not variables, nor is another case
    assert (lower.env, lower.chart_img_daily_limit, lower.charts_bucket_configured) == ("local", 44, False)


def test_an_empty_variable_is_unset(
    settings_environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # THREADS' default: 4 per CPU
    settings_environment(CHARTS_BUCKET="", CHART_IMG_PLAN="", THREADS="")
    settings = load_settings()
    assert settings.charts_bucket == "worker-chart-export-local" and not settings.charts_bucket_configured
    assert settings.chart_img_plan == "BASIC" and settings.threads == 12


# Every setting's default, written out (docs/configuration.md's table says the same).
DEFAULTS = {
    "env": "local",
    "charts_api_mode": ChartsApiMode.REAL,
    "charts_bucket": "worker-chart-export-local",
    "charts_default_timezone": "Etc/UTC",
    "chart_img_base_url": "https://api.chart-img.com",
    "chart_img_accounts_json": None,
    "chart_img_accounts_secret": None,
    "chart_img_daily_limit": 44,
    "chart_img_plan": "BASIC",
    "chart_img_rate_per_second": 1.0,
    "chart_img_burst": 3,
    "chart_img_request_timeout_seconds": 45.0,
    "chart_img_max_attempts": 5,
    "chart_concurrency": 8,
    "chart_reuse_max_age_seconds": 3600.0,
    "threads": 12,  # 4 per CPU, with 3 CPUs
    "request_timeout_seconds": 300.0,
    "finalize_budget_seconds": 30.0,
    "google_cloud_project": None,
    "firestore_emulator_host": None,
    "local_output_dir": Path("out"),
    "port": 8080,
    "step_max_attempts": 5,
    "step_retry_base_seconds": 60.0,
    "step_retry_max_seconds": 480.0,
}


def test_every_default_is_the_documented_value(
    settings_environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    settings_environment()
    settings = load_settings()
    from worker_chart_export import bundled

    folders = {"charts_fixtures_dir", "chart_templates_dir"}
    assert set(Settings.model_fields) == set(DEFAULTS) | folders, (
        "a setting was added: write its default here"
    )
    assert {name: getattr(settings, name) for name in DEFAULTS} == DEFAULTS
    assert settings.charts_fixtures_dir == bundled.fixtures_dir() / "chart-api"
    assert settings.chart_templates_dir == bundled.chart_templates_dir()
    assert load_settings(kind=RunLocalSettings).charts_api_mode is ChartsApiMode.MOCK


def documented_defaults() -> dict[str, str]:
    """docs/configuration.md's table: {variable: default column}."""
    table: dict[str, str] = {}
    for line in CONFIGURATION_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for variable in re.findall(r"`([A-Z_]+)`", cells[0]):
                table[variable] = cells[2]
    return table


@pytest.mark.parametrize(
    ("variable", "shown"),
    [
        ("CHARTS_API_MODE", "`real` (service), `mock` (run-local)"),
        ("CHARTS_BUCKET", "`worker-chart-export-local`"),
        ("CHART_IMG_BASE_URL", "`https://api.chart-img.com`"),
        ("CHART_IMG_DAILY_LIMIT", "`44`"),
        ("CHART_IMG_PLAN", "`BASIC`"),
        ("CHART_IMG_RATE_PER_SECOND", "`1`, `3`"),  # with CHART_IMG_BURST
        ("CHART_IMG_REQUEST_TIMEOUT_SECONDS", "`45`"),
        ("CHART_IMG_MAX_ATTEMPTS", "`5`"),
        ("CHART_CONCURRENCY", "`8`"),
        ("CHART_REUSE_MAX_AGE_SECONDS", "`3600`"),
        ("THREADS", "4 per CPU"),
        ("REQUEST_TIMEOUT_SECONDS", "`300`"),
        ("FINALIZE_BUDGET_SECONDS", "`30`"),
        ("CHARTS_DEFAULT_TIMEZONE", "`Etc/UTC`"),
        ("STEP_MAX_ATTEMPTS", "`5`"),
        ("STEP_RETRY_BASE_SECONDS", "`60`, `480`"),
        ("APP_ENV", "`local`"),
    ],
)
def test_the_configuration_doc_shows_the_same_defaults(variable: str, shown: str) -> None:
    assert documented_defaults()[variable] == shown


def test_flags_over_env_over_the_callers_defaults_over_the_settings_own(
    settings_environment: Environment,
) -> None:
    settings_environment()
    assert load_settings().charts_api_mode is ChartsApiMode.REAL
    assert load_settings(kind=RunLocalSettings).charts_api_mode is ChartsApiMode.MOCK
    settings_environment(CHARTS_API_MODE="record")
    assert load_settings(kind=RunLocalSettings).charts_api_mode is ChartsApiMode.RECORD
    flagged = load_settings({"charts_api_mode": "real", "charts_bucket": None}, kind=RunLocalSettings)
    assert flagged.charts_api_mode is ChartsApiMode.REAL  # None: the flag was not given
    assert not flagged.charts_bucket_configured


def test_no_dotenv_file_is_read(
    settings_environment: Environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_environment()
    (tmp_path / ".env").write_text("CHARTS_BUCKET=from-a-file\n")
    monkeypatch.chdir(tmp_path)
    assert not load_settings().charts_bucket_configured


def test_bad_values_name_their_variables_in_field_order_and_never_echo_the_input(
    settings_environment: Environment,
) -> None:
    settings_environment(THREADS="0", CHART_IMG_DAILY_LIMIT="s3cr3t-k3y")
    with pytest.raises(ConfigError) as caught:
        load_settings({"chart_concurrency": 65})
    error = caught.value
    assert error.setting == "CHART_IMG_DAILY_LIMIT"  # from the environment: its variable
    assert "; CHART_CONCURRENCY: " in error.problem and "; THREADS: " in error.problem  # a flag: its field's
    assert "s3cr3t" not in str(error)
    assert len(str(error).splitlines()) == 1


def test_the_reuse_window_is_read_bounded_and_reaches_the_step_limits(
    settings_environment: Environment,
) -> None:
    from worker_chart_export.bootstrap.builders import step_limits

    settings_environment()
    assert step_limits(load_settings()).chart_reuse_max_age_seconds == 3600.0
    settings_environment(CHART_REUSE_MAX_AGE_SECONDS="0")
    assert step_limits(load_settings()).chart_reuse_max_age_seconds == 0.0  # off
    for bad in ("-1", "86401", "soon"):
        settings_environment(CHART_REUSE_MAX_AGE_SECONDS=bad)
        with pytest.raises(ConfigError) as caught:
            load_settings()
        assert caught.value.setting == "CHART_REUSE_MAX_AGE_SECONDS" and bad not in str(caught.value)


def test_a_finalize_budget_not_below_the_request_timeout_is_refused_as_deploy_sh_refuses_it(
    settings_environment: Environment,
) -> None:
    settings_environment(REQUEST_TIMEOUT_SECONDS="30", FINALIZE_BUDGET_SECONDS="29.5")
    assert load_settings().finalize_budget_seconds == 29.5
    for finalize, timeout in (("30", "30"), ("31", "30"), ("30", None)):  # None: the default, 300
        settings_environment(FINALIZE_BUDGET_SECONDS=finalize, REQUEST_TIMEOUT_SECONDS=timeout or "")
        if timeout is None:
            assert load_settings().finalize_budget_seconds == 30.0
            continue
        with pytest.raises(ConfigError) as caught:
            load_settings()
        assert caught.value.setting == "FINALIZE_BUDGET_SECONDS"
        assert f"must be below REQUEST_TIMEOUT_SECONDS ({timeout})" in str(caught.value)
        assert len(str(caught.value).splitlines()) == 1
    settings_environment(REQUEST_TIMEOUT_SECONDS="20")  # FINALIZE_BUDGET_SECONDS' default, 30
    with pytest.raises(ConfigError, match=r"FINALIZE_BUDGET_SECONDS: .*below REQUEST_TIMEOUT_SECONDS \(20\)"):
        load_settings()
