"""Every setting has a test that sets it AWAY from its default and sees the effect where the
worker uses it (issue 28: the reaper's fixture used STEP_MAX_ATTEMPTS' default 3, so a pass
that ignored the setting passed every test). A setting added to Settings without such a test
fails here; the named tests are the audit, each able to fail on a wiring that drops its
setting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from worker_chart_export.settings import Settings

TESTS = Path(__file__).parents[1]
BOOTSTRAP_REACH = (
    "unit/test_bootstrap.py",
    "test_every_setting_reaches_the_step_limits_and_the_chart_img_options",
)
SECRET_REACH = (
    "unit/test_bootstrap.py",
    "test_the_worker_takes_its_accounts_from_chart_img_accounts_secret",
)

# the variable -> the test that sets it to a value other than its default and asserts its effect
REACHED_BY = {
    "APP_ENV": (
        "unit/cli/test_settings_reach.py",
        "test_run_local_logs_under_app_env",
    ),
    "PORT": (
        "unit/cli/test_settings_reach.py",
        "test_serve_listens_on_port_when_no_flag_says_otherwise",
    ),
    "CHARTS_API_MODE": (
        "unit/test_settings.py",
        "test_flags_over_env_over_the_callers_defaults_over_the_settings_own",
    ),
    "CHARTS_BUCKET": (
        "integration/test_serve_start_checks.py",
        "test_serve_refuses_to_start_on_a_bucket_that_does_not_exist",
    ),
    "CHARTS_FIXTURES_DIR": (
        "integration/test_run_local_real_mode.py",
        "test_record_then_mock_replay_gives_the_same_items",
    ),
    "CHART_TEMPLATES_DIR": (
        "unit/core/templates/test_template_rules.py",
        "test_run_local_checks_templates_against_the_configured_plan",
    ),
    "CHART_IMG_ACCOUNTS_JSON": (
        "unit/cli/test_accounts_quota.py",
        "test_json_carries_the_rows_and_totals",
    ),
    "CHARTS_LOCAL_OUTPUT_DIR": (
        "unit/cli/test_accounts_quota.py",
        "test_json_carries_the_rows_and_totals",
    ),
    "CHART_IMG_ACCOUNTS_SECRET": SECRET_REACH,
    "GOOGLE_CLOUD_PROJECT": SECRET_REACH,
    "FIRESTORE_EMULATOR_HOST": (
        "integration/test_accounts_command.py",
        "test_json_shows_each_account_as_its_documents_say",
    ),
    "STEP_MAX_ATTEMPTS": (
        "unit/functions/test_main_flow.py",
        "test_a_pass_reaps_with_the_attempts_and_the_clock_of_its_runtime",
    ),
    **dict.fromkeys(
        (
            "REQUEST_TIMEOUT_SECONDS",
            "FINALIZE_BUDGET_SECONDS",
            "CHART_CONCURRENCY",
            "CHARTS_DEFAULT_TIMEZONE",
            "CHART_IMG_PLAN",
            "CHART_REUSE_MAX_AGE_SECONDS",
            "THREADS",
            "CHART_IMG_BASE_URL",
            "CHART_IMG_REQUEST_TIMEOUT_SECONDS",
            "CHART_IMG_MAX_ATTEMPTS",
            "CHART_IMG_DAILY_LIMIT",
            "CHART_IMG_RATE_PER_SECOND",
            "CHART_IMG_BURST",
            "STEP_RETRY_BASE_SECONDS",
            "STEP_RETRY_MAX_SECONDS",
        ),
        BOOTSTRAP_REACH,
    ),
}


def test_every_setting_is_audited() -> None:
    variables = {str(field.validation_alias) for field in Settings.model_fields.values()}
    assert set(REACHED_BY) == variables


@pytest.mark.parametrize("variable", sorted(REACHED_BY))
def test_the_audited_test_exists_and_names_its_setting(variable: str) -> None:
    """The test is there (renamed, the audit would point nowhere) and its module names the
    variable (some set it through a table of the module, as test_bootstrap's
    NOT_THE_DEFAULTS)."""
    path, name = REACHED_BY[variable]
    source = (TESTS / path).read_text(encoding="utf-8")
    tests = {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}
    assert name in tests, f"{path} has no {name}"
    assert variable in source, f"{path} never names {variable}"
