"""Settings from the environment (pydantic-settings): the exact variable names, empty as
unset, flags over env over a caller's defaults over Settings', errors that name the variable
and never echo the value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.settings import ChartsApiMode, RunLocalSettings, Settings, load_settings

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


def test_an_empty_variable_is_unset(settings_environment: Environment) -> None:
    settings_environment(CHARTS_BUCKET="", CHART_IMG_PLAN="", THREADS="")
    settings = load_settings()
    assert settings.charts_bucket == "worker-chart-export-local" and not settings.charts_bucket_configured
    assert settings.chart_img_plan == "BASIC" and settings.threads == Settings().threads


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
    assert step_limits(load_settings()).chart_reuse_max_age_seconds == 900.0
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
