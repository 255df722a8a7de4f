"""The run page in a real browser: Debian's chromium, headless, driven through chromedriver.

Pages come from real runs (run-local in mock mode, through the installed console script) read
from the local bucket mirror and from fake-gcs-server. Each test checks that the page loads,
every <img> decodes (naturalWidth > 0 after img.decode()), nothing is fetched, the console is
clean and the failures table lists the manifest's codes; a full-page screenshot goes to
out/test-artifacts/. scripts/install_test_tools.sh installs chromium; without it these tests fail.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, SAMPLE_FLOW_RUN
from worker_chart_export.cli.main import main
from worker_chart_export.tools.view import EXIT_BAD_INPUT, EXIT_OK

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = REPO / "out" / "test-artifacts"
CLI = Path(sys.executable).parent / "worker-chart-export"
RUN_ID, STEP_ID = "run_20261122_btcusdt_0001", "charts_1h"
# Flags that keep chromium off the network: this machine's closed network refuses its calls.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",  # a full-page screenshot, not one cut by a scrollbar's width
    "--window-size=1280,900",
]
PAGE_WIDTH = 1280


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `bash scripts/install_test_tools.sh` (as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)  # with the explicit driver: selenium-manager never runs
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _run_local(
    flow_run: Path, output_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> Path | None:
    """run-local through the installed console script; returns the local step folder, if any."""
    if not CLI.is_file():
        pytest.fail(f"{CLI} missing: install the project (`bash scripts/bootstrap.sh`)")
    command = [str(CLI), "run-local", "--flow-run-path", str(flow_run), "--output-dir", str(output_dir)]
    done = subprocess.run(
        [*command, "--charts-api-mode", "mock", "--output-summary", "json", *extra],
        env={k: v for k, v in os.environ.items() if not k.startswith("CHARTS_")} | (env or {}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), f"run-local exited {done.returncode}: {done.stderr[-2000:]}"
    summary = json.loads(done.stdout)
    if not summary.get("localArtifactsDir"):
        return None
    # the local folder mirrors the bucket: gs://<bucket>/<name> is <localArtifactsDir>/<bucket>/<name>
    manifest_object = summary["outputsManifestGcsUri"].removeprefix("gs://")
    return (Path(summary["localArtifactsDir"]) / manifest_object).parent


def _view(*argv: str) -> None:
    assert main(["view", *argv]) == EXIT_OK


def _open(driver: Any, page: Path, screenshot_name: str) -> dict[str, Any]:
    """Loads the page, waits for every image to decode, saves a full-page screenshot."""
    from selenium.webdriver.common.by import By

    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    images = driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
        Promise.all(Array.from(document.images).map(img => img.decode().then(
            () => ({template: img.closest('figure').dataset.template, width: img.naturalWidth}),
            err => ({template: img.closest('figure').dataset.template, width: 0, error: String(err)}))))
        .then(done);"""
    )
    height = 900
    for _ in range(2):  # the page's height at PAGE_WIDTH, then a viewport that tall
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": PAGE_WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        height = driver.execute_script("return document.documentElement.scrollHeight")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    (ARTIFACTS / screenshot_name).write_bytes(base64.b64decode(shot["data"]))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return {
        "images": images,
        "placeholders": len(driver.find_elements(By.CSS_SELECTOR, "figure .placeholder")),
        "codes": [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#failures tbody td .code")],
        "status": driver.find_element(By.ID, "step-status").text,
        "fetched": driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"),
        "console": [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")],
        "problems": [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#problems li")],
    }


def _assert_page(
    seen: dict[str, Any], manifest: dict[str, Any], missing: frozenset[str] = frozenset()
) -> None:
    shown = {i["chartTemplateId"] for i in manifest["items"]} - missing
    assert sorted(i["template"] for i in seen["images"]) == sorted(shown)
    assert all(i["width"] > 0 for i in seen["images"]), seen["images"]
    assert seen["placeholders"] == len(missing)
    assert seen["codes"] == [f["error"]["code"] for f in manifest["failures"]]
    assert seen["fetched"] == [] and seen["console"] == []


def test_sample_run_page_in_chromium(browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    step_dir = _run_local(SAMPLE_FLOW_RUN, tmp_path)
    assert step_dir is not None
    monkeypatch.chdir(tmp_path)
    _view(str(tmp_path))  # run-local's output folder, as a user would pass it
    manifest = json.loads((step_dir / "manifest.json").read_text())
    page = tmp_path / "out" / "view" / f"chart-view-{RUN_ID}-{STEP_ID}.html"  # the default place
    seen = _open(browser, page, "view-sample.png")
    assert len(seen["images"]) == 3 and seen["status"] == "SUCCEEDED" and seen["problems"] == []
    _assert_page(seen, manifest)
    assert (ARTIFACTS / "view-sample.png").stat().st_size > 10_000


def _fixtures_with_failures(tmp_path: Path) -> Path:
    """The bundled fixtures, but BTCUSDT's momentum chart has none (CHART_API_MOCK_MISSING) and
    its PSAR chart answers 422 (CHART_API_FAILED)."""
    root = tmp_path / "fixtures"
    shutil.copytree(REPO / "fixtures" / "chart-api", root)
    recorded = root / "chart-img" / "advanced-chart-v2"
    (recorded / "BINANCE_BTCUSDT__1h__momentum_rsi_macd_v1.png").unlink()
    (recorded / "BINANCE_BTCUSDT__1h__price_psar_adi_v1.png").unlink()
    shutil.copy(
        recorded / "BINANCE_NOSUCHCOIN__1h__price_psar_adi_v1__422_INVALID_SYMBOL.json",
        recorded / "BINANCE_BTCUSDT__1h__price_psar_adi_v1__422_INVALID_SYMBOL.json",
    )
    return root


def test_failures_and_a_missing_png_in_chromium(browser: Any, tmp_path: Path) -> None:
    flow_run = json.loads(SAMPLE_FLOW_RUN.read_text())
    step = flow_run["steps"][STEP_ID]
    step["inputs"]["requests"] += [{"chartTemplateId": "bybit_perp_bbands_v1"}]
    step["inputs"]["minImages"] = 3
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(flow_run))
    fixtures = _fixtures_with_failures(tmp_path)
    step_dir = _run_local(path, tmp_path / "out", env={"CHARTS_FIXTURES_DIR": str(fixtures)})
    assert step_dir is not None
    manifest = json.loads((step_dir / "manifest.json").read_text())
    assert len(manifest["items"]) == 2 and len(manifest["failures"]) == 2
    lost = manifest["items"][1]  # a PNG deleted after the run: a placeholder, not a crash
    (step_dir / lost["png_gcs_uri"].rsplit("/", 1)[1]).unlink()
    page = tmp_path / "page.html"
    state = tmp_path / "out" / "flow_runs" / f"{RUN_ID}.json"
    _view(str(step_dir / "manifest.json"), "--output", str(page), "--flow-run-state", str(state))
    seen = _open(browser, page, "view-failures.png")
    assert {"CHART_API_MOCK_MISSING", "CHART_API_FAILED"} <= set(seen["codes"]) and seen["status"] == "FAILED"
    _assert_page(seen, manifest, frozenset({lost["chartTemplateId"]}))
    assert len(seen["problems"]) == 1 and lost["chartTemplateId"] in seen["problems"][0]


@pytest.mark.emulators
def test_gs_manifest_through_fake_gcs_server_in_chromium(
    browser: Any, tmp_path: Path, gcs_bucket: tuple[Any, str]
) -> None:
    _, bucket = gcs_bucket  # STORAGE_EMULATOR_HOST is set: run-local and view both use it
    assert _run_local(SAMPLE_FLOW_RUN, tmp_path, f"--charts-bucket=gs://{bucket}") is None
    uri = f"gs://{bucket}/charts/{RUN_ID}/{STEP_ID}/manifest.json"
    page = tmp_path / "gs-page.html"
    _view(uri, "--output", str(page))
    client, _ = gcs_bucket
    manifest = json.loads(
        client.bucket(bucket).blob(f"charts/{RUN_ID}/{STEP_ID}/manifest.json").download_as_bytes()
    )
    seen = _open(browser, page, "view-gcs.png")
    assert len(seen["images"]) == 3 and seen["status"] == "SUCCEEDED"
    _assert_page(seen, manifest)


@pytest.mark.emulators
def test_gs_prefix_default_page_missing_object_and_absent_manifest(
    tmp_path: Path,
    gcs_bucket: tuple[Any, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client, bucket = gcs_bucket
    _run_local(SAMPLE_FLOW_RUN, tmp_path / "run", f"--charts-bucket=gs://{bucket}")
    prefix = f"charts/{RUN_ID}/{STEP_ID}/"
    manifest = json.loads(client.bucket(bucket).blob(f"{prefix}manifest.json").download_as_bytes())
    lost = manifest["items"][0]["png_gcs_uri"]
    client.bucket(bucket).blob(lost.removeprefix(f"gs://{bucket}/")).delete()
    monkeypatch.chdir(tmp_path)
    _view(f"gs://{bucket}/{prefix}")  # the step's prefix: manifest.json is implied
    out, err = capsys.readouterr()
    page = tmp_path / "out" / "view" / f"chart-view-{RUN_ID}-{STEP_ID}.html"
    assert (
        page.as_uri() in out
        and f"problem: {manifest['items'][0]['chartTemplateId']}: {lost} does not exist" in err
    )
    assert page.read_text().count("<img ") == 2 and "Image unavailable" in page.read_text()

    absent = f"gs://{bucket}/charts/{RUN_ID}/no_such_step/manifest.json"
    assert main(["view", absent]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == f"worker-chart-export view: error: {absent} does not exist\n"
