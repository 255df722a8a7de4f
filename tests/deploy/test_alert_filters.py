"""The log-based metrics in deploy/monitoring/ match the lines the worker really writes.

The lines come from `worker-chart-export run-local` in real mode against the local CHART-IMG
stand-in (the same logging set-up as the served function): a run with every account out of
quota, a run failing on minImages, and a run that succeeds. Each line goes through Cloud Run's
structured-logging mapping (logging_filter.cloud_run_entry), then each metric's filter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from logging_filter import cloud_run_entry, extract, matches

from harness.builders import REPO, chart_step, flow_run, load_templates
from harness.chart_img_server import ChartImgServer

SCRIPT = str(Path(sys.executable).parent / "worker-chart-export")
MONITORING = REPO / "deploy" / "monitoring"


def metric(name: str) -> dict[str, Any]:
    return dict(json.loads((MONITORING / f"{name}.metric.json").read_text()))


def run_worker(tmp_path: Path, server: ChartImgServer, step: dict[str, Any], *, exhausted: bool) -> list[str]:
    """One real-mode run-local; returns the JSON log lines it wrote."""
    tmp_path.mkdir(parents=True)
    keys = {a: server.add_account(a) for a in (f"{tmp_path.name}1", f"{tmp_path.name}2")}
    accounts = tmp_path / "chart-img.accounts.local.json"
    accounts.write_text(
        json.dumps([{"id": a, "apiKey": k, "ratePerSecond": 50, "burst": 10} for a, k in keys.items()])
    )
    out = tmp_path / "out"
    out.mkdir()
    if exhausted:
        today = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
        (out / "chart_img_accounts_usage.json").write_text(
            json.dumps({a: {"usageToday": 44, "windowStart": today} for a in keys})
        )
    source = tmp_path / "run1.json"
    source.write_text(json.dumps(flow_run({"charts": step})))
    result = subprocess.run(
        [
            SCRIPT,
            "run-local",
            f"--flow-run-path={source}",
            f"--output-dir={out}",
            "--output-summary=json",
            "--charts-api-mode=real",
            f"--accounts-config-path={accounts}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={
            **os.environ,
            "CHARTS_BUCKET": "",
            "CHART_IMG_ACCOUNTS_JSON": "",
            "CHART_IMG_BASE_URL": server.base_url,
        },
    )
    print(result.stderr)  # the suite's key scan reads the worker's logs too
    lines = [line for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines, f"the worker wrote no JSON line: {result.stderr[-2000:]}"
    return lines


@pytest.fixture
def server(chart_img_server: ChartImgServer) -> ChartImgServer:
    for template_id, template in load_templates().items():
        chart_img_server.register_template(template_id, template["request"])
    return chart_img_server


@pytest.fixture
def exhausted_lines(tmp_path: Path, server: ChartImgServer) -> list[str]:
    return run_worker(tmp_path / "exhausted", server, chart_step(), exhausted=True)


def test_exhaustion_metric_counts_the_one_exhaustion_line_of_a_real_run(exhausted_lines: list[str]) -> None:
    config = metric("chart_img_accounts_exhausted")
    entries = [cloud_run_entry(line) for line in exhausted_lines]
    hits = [e for e in entries if matches(config["filter"], e)]
    assert len(hits) == 1, [e.get("jsonPayload", {}).get("message") for e in entries]
    [hit] = hits
    assert hit["severity"] == "ERROR" and sorted(hit["jsonPayload"]["exhaustedAccounts"]) == [
        "exhausted1",
        "exhausted2",
    ]
    assert "severity" not in hit["jsonPayload"]  # moved to the LogEntry by Cloud Run
    assert {k: extract(v, hit) for k, v in config["labelExtractors"].items()} == {
        "service_name": "worker-chart-export"
    }


def test_failed_metric_counts_the_exhausted_step_with_its_code(exhausted_lines: list[str]) -> None:
    config = metric("chart_export_steps_failed")
    hits = [e for e in map(cloud_run_entry, exhausted_lines) if matches(config["filter"], e)]
    assert len(hits) == 1
    assert extract(config["labelExtractors"]["error_code"], hits[0]) == "CHART_API_LIMIT_EXCEEDED"


def test_failed_metric_counts_a_min_images_failure_and_not_a_success(
    tmp_path: Path, server: ChartImgServer
) -> None:
    server.script(template="momentum_rsi_macd_v1", status=422, message="Invalid Interval")
    failing = chart_step()
    failing["inputs"]["minImages"] = 3
    failed_lines = run_worker(tmp_path / "failed", server, failing, exhausted=False)
    succeeded_lines = run_worker(tmp_path / "ok", server, chart_step(), exhausted=False)

    failed_metric = metric("chart_export_steps_failed")
    exhausted_metric = metric("chart_img_accounts_exhausted")
    failed_entries = [cloud_run_entry(line) for line in failed_lines]
    hits = [e for e in failed_entries if matches(failed_metric["filter"], e)]
    assert [extract(failed_metric["labelExtractors"]["error_code"], e) for e in hits] == ["CHART_API_FAILED"]
    # A run that succeeds, and charts that failed without exhausting the accounts, raise nothing.
    ok_entries = [cloud_run_entry(line) for line in succeeded_lines]
    assert any(e["jsonPayload"].get("message") == "step completed" for e in ok_entries)
    assert not [e for e in ok_entries if matches(failed_metric["filter"], e)]
    assert not [e for e in failed_entries + ok_entries if matches(exhausted_metric["filter"], e)]


@pytest.mark.parametrize("name", ["chart_img_accounts_exhausted", "chart_export_steps_failed"])
def test_each_metric_has_a_policy_on_it(name: str) -> None:
    config = metric(name)
    assert config["name"] == name
    policy = json.loads((MONITORING / f"{name}.policy.json").read_text())
    [condition] = policy["conditions"]
    threshold = condition["conditionThreshold"]
    assert f'metric.type="logging.googleapis.com/user/{name}"' in threshold["filter"]
    assert threshold["comparison"] == "COMPARISON_GT" and threshold["thresholdValue"] == 0
    assert "RUNBOOK.md" in policy["documentation"]["content"]
    grouped = {f for a in threshold["aggregations"] for f in a.get("groupByFields", [])}
    labels = {label["key"] for label in config["metricDescriptor"]["labels"]}
    assert grouped <= {f"metric.label.{k}" for k in labels}
    assert set(config["labelExtractors"]) == labels
