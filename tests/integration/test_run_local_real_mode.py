"""run-local in real and record modes against the local CHART-IMG stand-in, as a user runs it:
the console script, an accounts file, CHART_IMG_BASE_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, TEMPLATES_DIR, chart_step, flow_run
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.midnight import now_with_room_in_the_day

SCRIPT = str(Path(sys.executable).parent / "worker-chart-export")


@pytest.fixture
def server(chart_img_server: ChartImgServer) -> ChartImgServer:
    register_templates_from(chart_img_server, TEMPLATES_DIR)
    return chart_img_server


def run_local(
    tmp_path: Path, doc: dict[str, Any], *args: str, env: dict[str, str]
) -> tuple[int, dict[str, Any], str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = tmp_path / f"{doc['runId']}.json"
    source.write_text(json.dumps(doc))
    result = subprocess.run(
        [
            SCRIPT,
            "run-local",
            f"--flow-run-path={source}",
            f"--output-dir={tmp_path / 'out'}",
            "--output-summary=json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "CHARTS_BUCKET": "", "CHART_IMG_ACCOUNTS_JSON": "", **env},
    )
    print(result.stderr)  # captured by pytest, so the suite's key scan reads the worker's logs too
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, summary, result.stderr


def accounts_file(tmp_path: Path, server: ChartImgServer, *ids: str) -> tuple[Path, list[str]]:
    keys = [server.add_account(account_id) for account_id in ids]
    path = tmp_path / "chart-img.accounts.local.json"
    path.write_text(
        json.dumps(
            [{"id": i, "apiKey": k, "ratePerSecond": 50, "burst": 10} for i, k in zip(ids, keys, strict=True)]
        )
    )
    return path, keys


def manifest_of(tmp_path: Path, summary: dict[str, Any]) -> dict[str, Any]:
    uri = summary["outputsManifestGcsUri"].removeprefix("gs://")
    return json.loads((tmp_path / "out" / "gcs" / uri).read_text())


def test_real_mode_renders_through_the_api_and_never_shows_a_key(
    tmp_path: Path, server: ChartImgServer
) -> None:
    accounts, keys = accounts_file(tmp_path, server, "acc1", "acc2")
    code, summary, logs = run_local(
        tmp_path,
        flow_run({"charts": chart_step()}),
        "--charts-api-mode=real",
        f"--accounts-config-path={accounts}",
        env={"CHART_IMG_BASE_URL": server.base_url},
    )
    assert code == 0, logs
    assert (
        summary["status"] == "SUCCEEDED" and summary["itemsCount"] == 3 and summary["chartsApiMode"] == "real"
    )
    assert server.count() == 3 and {r.account_id for r in server.requests} == {"acc1", "acc2"}  # spread
    calls = [json.loads(line) for line in logs.splitlines() if '"chartsApi.request"' in line]
    assert len(calls) == 3 and all(
        c["accountId"] in ("acc1", "acc2") and c["httpStatus"] == 200 for c in calls
    )
    produced = (
        logs
        + json.dumps(summary)
        + "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*.json"))
    )
    assert not [k for k in keys if k in produced]


@pytest.mark.parametrize(("min_images", "status", "code"), [(2, "SUCCEEDED", 0), (3, "FAILED", 1)])
def test_mixed_step_min_images_decides(
    tmp_path: Path, server: ChartImgServer, min_images: int, status: str, code: int
) -> None:
    server.script(template="momentum_rsi_macd_v1", status=422, message="Invalid Interval")
    accounts, _ = accounts_file(tmp_path, server, "acc1")
    step = chart_step()
    step["inputs"]["minImages"] = min_images
    exit_code, summary, logs = run_local(
        tmp_path,
        flow_run({"charts": step}),
        "--charts-api-mode=real",
        f"--accounts-config-path={accounts}",
        env={"CHART_IMG_BASE_URL": server.base_url},
    )
    assert exit_code == code, logs
    assert summary["status"] == status and summary["itemsCount"] == 2 and summary["failuresCount"] == 1
    [failure] = manifest_of(tmp_path, summary)["failures"]
    assert failure["request"] == {"chartTemplateId": "momentum_rsi_macd_v1"}
    assert failure["error"]["code"] == "CHART_API_FAILED" and failure["error"]["details"]["httpStatus"] == 422
    assert server.count() == 3  # a 422 is final: no retry


def test_record_then_mock_replay_gives_the_same_items(tmp_path: Path, server: ChartImgServer) -> None:
    fixtures = tmp_path / "fixtures"
    server.script(template="momentum_rsi_macd_v1", status=403, message="Exceed Max Usage Parameter Limit (3)")
    accounts, _ = accounts_file(tmp_path, server, "acc1")
    env = {"CHART_IMG_BASE_URL": server.base_url, "CHARTS_FIXTURES_DIR": str(fixtures)}
    doc = flow_run({"charts": chart_step()})
    code, recorded, logs = run_local(
        tmp_path / "rec", doc, "--charts-api-mode=record", f"--accounts-config-path={accounts}", env=env
    )
    assert code == 0, logs
    saved = sorted(p.name for p in (fixtures / "chart-img" / "advanced-chart-v2").iterdir())
    assert saved == [
        "BINANCE_BTCUSDT__1h__momentum_rsi_macd_v1__403_EXCEED_MAX_USAGE_PARAMETER_LIMIT_3.json",
        "BINANCE_BTCUSDT__1h__price_ema_volume_v1.png",
        "BINANCE_BTCUSDT__1h__price_psar_adi_v1.png",
    ]
    calls_after_record = server.count()
    code, replayed, logs = run_local(tmp_path / "mock", doc, "--charts-api-mode=mock", env=env)
    assert code == 0, logs
    assert server.count() == calls_after_record  # mock made no call

    def essence(manifest: dict[str, Any]) -> tuple[Any, Any]:
        items = [(i["chartTemplateId"], i["kind"]) for i in manifest["items"]]
        failures = [
            (f["request"], f["error"]["code"], f["error"]["details"]["httpStatus"])
            for f in manifest["failures"]
        ]
        return items, failures

    assert essence(manifest_of(tmp_path / "rec", recorded)) == essence(
        manifest_of(tmp_path / "mock", replayed)
    )
    rec_pngs = sorted(p.read_bytes() for p in (tmp_path / "rec" / "out" / "gcs").rglob("*.png"))
    mock_pngs = sorted(p.read_bytes() for p in (tmp_path / "mock" / "out" / "gcs").rglob("*.png"))
    assert rec_pngs == mock_pngs and len(rec_pngs) == 2


def test_exhausted_accounts_make_no_call_and_log_one_error(tmp_path: Path, server: ChartImgServer) -> None:
    accounts, _ = accounts_file(tmp_path, server, "acc1", "acc2")
    usage = tmp_path / "out" / "chart_img_accounts_usage.json"
    usage.parent.mkdir(parents=True)
    today = now_with_room_in_the_day().strftime("%Y-%m-%dT00:00:00Z")
    usage.write_text(json.dumps({a: {"usageToday": 44, "windowStart": today} for a in ("acc1", "acc2")}))
    code, summary, logs = run_local(
        tmp_path,
        flow_run({"charts": chart_step()}),
        "--charts-api-mode=real",
        f"--accounts-config-path={accounts}",
        env={"CHART_IMG_BASE_URL": server.base_url},
    )
    assert code == 1 and summary["errorCode"] == "CHART_API_LIMIT_EXCEEDED"
    assert server.count() == 0
    events = [json.loads(line) for line in logs.splitlines() if '"chart-img accounts exhausted"' in line]
    assert len(events) == 1
    event = events[0]
    assert event["severity"] == "ERROR" and sorted(event["exhaustedAccounts"]) == ["acc1", "acc2"]
    assert event["runId"] == "run1" and event["stepId"] == "charts" and event["service"] and event["env"]


def test_accounts_shows_what_a_real_run_spent(tmp_path: Path, server: ChartImgServer) -> None:
    """`accounts --output-dir` on the usage file a real run-local left: every HTTP attempt is
    a unit, and the key CHART-IMG refused for the day has nothing left."""
    keys = {"acc1": server.add_account("acc1", daily_quota=0), "acc2": server.add_account("acc2")}
    accounts = tmp_path / "chart-img.accounts.local.json"
    accounts.write_text(json.dumps([{"id": a, "apiKey": k, "plan": "ULTRA"} for a, k in keys.items()]))
    env = {"CHART_IMG_BASE_URL": server.base_url}
    code, summary, _ = run_local(
        tmp_path,
        flow_run({"charts": chart_step()}),
        "--charts-api-mode=real",
        f"--accounts-config-path={accounts}",
        env=env,
    )
    assert (code, summary["status"]) == (0, "SUCCEEDED"), summary
    assert server.count("acc1") >= 1  # the first pick: it met "Limit Exceeded"
    shown = subprocess.run(
        [
            SCRIPT,
            "accounts",
            f"--output-dir={tmp_path / 'out'}",
            f"--accounts-config-path={accounts}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "CHART_IMG_ACCOUNTS_JSON": "", **env},
    )
    print(shown.stdout, shown.stderr)
    assert shown.returncode == 0 and not any(key in shown.stdout + shown.stderr for key in keys.values())
    rows = {row["accountId"]: row for row in json.loads(shown.stdout)["accounts"]}
    assert (rows["acc1"]["leftToday"], rows["acc1"]["state"]) == (0, "exhausted")
    assert (rows["acc2"]["usedToday"], rows["acc2"]["leftToday"]) == (
        server.count("acc2"),
        3000 - server.count("acc2"),
    )
    assert json.loads(shown.stdout)["totals"]["leftToday"] == 3000 - server.count("acc2")
