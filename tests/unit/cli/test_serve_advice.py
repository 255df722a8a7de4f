"""Issue 39: when `serve` refuses to start for want of a setting, its line speaks of what serve
reads. It has no --accounts-config-path (run-local has), and a bucket the user never set is
named as not set, not as the default name the user never chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.firestore_emulator import free_port
from worker_chart_export.cli.main import main

_SETTINGS = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "STORAGE_EMULATOR_HOST",
    "FIRESTORE_EMULATOR_HOST",
    "CHARTS_API_MODE",
    "CHARTS_BUCKET",
    "CHART_IMG_ACCOUNTS_JSON",
    "CHART_IMG_ACCOUNTS_SECRET",
    "PORT",
    "FUNCTION_TARGET",
)


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No setting of the worker's; credentials that cannot be found (no cloud is asked)."""
    for name in _SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-credentials.json"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "demo-advice")
    return monkeypatch


NO_ACCOUNTS = (
    "worker-chart-export serve: error: CHART_IMG_ACCOUNTS_JSON: no CHART-IMG accounts configured: set "
    "CHART_IMG_ACCOUNTS_JSON (the accounts' JSON) or CHART_IMG_ACCOUNTS_SECRET (a Secret Manager secret "
    "holding it), or serve with CHARTS_API_MODE=mock (no CHART-IMG call)"
)
NO_BUCKET = (
    "worker-chart-export serve: error: CHARTS_BUCKET: not set, and serve stores the charts in a bucket "
    "it checks before it listens: set CHARTS_BUCKET to one you can write (with Application Default "
    "Credentials, or STORAGE_EMULATOR_HOST for an emulator); run-local and stack up need no bucket"
)


@pytest.mark.parametrize(
    ("settings", "expected", "whole"),
    [
        # the two a newcomer met: serve's own advice
        ({"CHARTS_API_MODE": "real"}, NO_ACCOUNTS, True),
        ({"CHARTS_API_MODE": "mock"}, NO_BUCKET, True),
        # what the user did set is still named as before
        (
            {"CHARTS_API_MODE": "mock", "CHARTS_BUCKET": "acme-charts"},
            "worker-chart-export serve: error: CHARTS_BUCKET: bucket 'acme-charts' is configured but no "
            "Google Cloud credentials were found",
            False,
        ),
        (
            {"CHARTS_API_MODE": "real", "CHART_IMG_ACCOUNTS_JSON": '[{"id": "acc1"}]'},
            "worker-chart-export serve: error: CHART_IMG_ACCOUNTS_JSON: item 1: missing 'apiKey'",
            True,
        ),
    ],
    ids=["no-accounts", "no-bucket", "bucket-set", "accounts-set"],
)
def test_serve_refuses_in_its_own_terms(
    bare: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, str],
    expected: str,
    whole: bool,
) -> None:
    for name, value in settings.items():
        bare.setenv(name, value)
    code = main(["serve", "--host", "127.0.0.1", "--port", str(free_port())])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line == expected if whole else line.startswith(expected)
