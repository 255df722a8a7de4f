"""Issue 25, item 4: `serve` (and the instance's warm-up) refuse a bucket that cannot store
the charts before anything is paid for, and `serve` refuses FINALIZE_BUDGET_SECONDS >=
REQUEST_TIMEOUT_SECONDS as deploy.sh does: exit 2 and one line, on fake-gcs-server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import storage

from harness.firestore_emulator import free_port
from harness.gcs_emulator import GcsEmulator
from harness.logs import LogCapture
from worker_chart_export import bootstrap
from worker_chart_export.bootstrap import Runtime
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.settings import load_settings
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

SCRIPT = str(Path(sys.executable).parent / "worker-chart-export")


def serve(emulator: GcsEmulator, **env: str) -> subprocess.CompletedProcess[str]:
    """`worker-chart-export serve` as Cloud Run starts it, with a port it never gets to use."""
    environment = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CHART", "FIRESTORE", "REQUEST", "FINALIZE"))
        },
        "STORAGE_EMULATOR_HOST": emulator.url,
        "GOOGLE_CLOUD_PROJECT": "test-project",
        "CHARTS_API_MODE": "mock",
        "PORT": str(free_port()),  # never bound: every case stops before serving
        **env,
    }
    return subprocess.run([SCRIPT, "serve"], capture_output=True, text=True, timeout=120, env=environment)


def test_serve_refuses_to_start_on_a_bucket_that_does_not_exist(gcs_emulator: GcsEmulator) -> None:
    result = serve(gcs_emulator, CHARTS_BUCKET="no-such-charts-bucket")
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("worker-chart-export serve: error: CHARTS_BUCKET: bucket 'no-such-charts-bucket'")
    assert "not found" in line
    assert "serving the function" not in result.stdout  # nothing was served


@pytest.mark.parametrize(("finalize", "timeout"), [("30", "30"), ("45", "30"), ("30", "20")])
def test_serve_refuses_a_finalize_budget_not_below_the_request_timeout(
    gcs_emulator: GcsEmulator, gcs_bucket: tuple[storage.Client, str], finalize: str, timeout: str
) -> None:
    result = serve(
        gcs_emulator,
        CHARTS_BUCKET=gcs_bucket[1],
        FINALIZE_BUDGET_SECONDS=finalize,
        REQUEST_TIMEOUT_SECONDS=timeout,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("worker-chart-export serve: error: FINALIZE_BUDGET_SECONDS: ")
    assert f"must be below REQUEST_TIMEOUT_SECONDS ({timeout})" in line


def test_the_start_check_leaves_nothing_in_a_bucket_it_accepts(
    gcs_emulator: GcsEmulator, gcs_bucket: tuple[storage.Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, bucket = gcs_bucket
    monkeypatch.setenv("CHARTS_BUCKET", bucket)
    monkeypatch.setenv("CHARTS_API_MODE", "mock")
    summary = bootstrap.check_configuration(load_settings())
    assert summary["chartsBucket"] == bucket
    assert list(client.list_blobs(bucket)) == []


def test_the_warm_up_says_at_once_that_the_bucket_is_missing(
    gcs_emulator: GcsEmulator,
    monkeypatch: pytest.MonkeyPatch,
    log_capture: LogCapture,
    firestore_client: object,
) -> None:
    monkeypatch.setenv("CHARTS_BUCKET", "no-such-charts-bucket")
    monkeypatch.setenv("CHARTS_API_MODE", "mock")
    runtime = Runtime(load_settings(), FakeClock())
    with pytest.raises(ConfigError) as refused:
        runtime.step().connect()
    assert refused.value.setting == "CHARTS_BUCKET" and "'no-such-charts-bucket'" in str(refused.value)

    monkeypatch.setattr(bootstrap, "_runtime", runtime)
    bootstrap.warm_up()
    (line,) = log_capture.events("instance warm-up failed: configuration")
    assert line["severity"] == "ERROR" and line["setting"] == "CHARTS_BUCKET"
    assert "no-such-charts-bucket" in line["reason"]
