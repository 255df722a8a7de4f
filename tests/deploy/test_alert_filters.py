"""The log-based metrics in deploy/monitoring/ match the lines the worker really writes, and the
dashboard's charts count what they say.

The lines come from `worker-chart-export run-local` in real mode against the local CHART-IMG
stand-in (the same logging set-up as the served function): a run with every account out of
quota, a run failing on minImages, and a run that succeeds. Each line goes through Cloud Run's
structured-logging mapping (logging_filter.cloud_run_entry), then each metric's filter; the
points a metric would get (its labels extracted) then go through the dashboard's chart filters
and groupings (Monitoring's filters use the same comparisons).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from logging_filter import cloud_run_entry, extract, matches

from harness.builders import REPO, TEMPLATES_DIR, chart_step, flow_run
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.midnight import now_with_room_in_the_day

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
        today = now_with_room_in_the_day().strftime("%Y-%m-%dT00:00:00Z")
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
    register_templates_from(chart_img_server, TEMPLATES_DIR)
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


def dashboard_charts() -> dict[str, dict[str, Any]]:
    """Each chart of the dashboard by title: its one time-series filter and aggregation."""
    dashboard = json.loads((MONITORING / "worker-chart-export.dashboard.json").read_text())
    charts = {}
    for tile in dashboard["mosaicLayout"]["tiles"]:
        if "xyChart" in tile["widget"]:
            [data_set] = tile["widget"]["xyChart"]["dataSets"]
            charts[tile["widget"]["title"]] = data_set["timeSeriesQuery"]["timeSeriesFilter"]
    return charts


def points(lines: list[str], name: str) -> list[dict[str, Any]]:
    """What log-based metric `name` records for these lines: one point per matching entry,
    its labels as Cloud Logging extracts them (a number as its text, a missing value empty)."""
    config = metric(name)
    found = []
    for entry in map(cloud_run_entry, lines):
        if matches(config["filter"], entry):
            labels = {k: extract(v, entry) for k, v in config["labelExtractors"].items()}
            found.append(
                {
                    "metric": {
                        "type": f"logging.googleapis.com/user/{name}",
                        "label": {k: "" if v is None else str(v) for k, v in labels.items()},
                    },
                    "resource": entry["resource"],
                }
            )
    return found


def charted(title: str, recorded: list[dict[str, Any]]) -> Counter[tuple[str, ...]]:
    """The dashboard chart's sum over these points, by its groupByFields."""
    series = dashboard_charts()[title]
    grouped = series["aggregation"].get("groupByFields", [])
    counted: Counter[tuple[str, ...]] = Counter()
    for point in recorded:
        if matches(series["filter"], point):
            counted[tuple(point["metric"]["label"][f.removeprefix("metric.label.")] for f in grouped)] += 1
    return counted


def test_every_request_is_a_unit_and_a_success_is_a_chart(tmp_path: Path, server: ChartImgServer) -> None:
    server.script(template="momentum_rsi_macd_v1", status=422, message="Invalid Interval")
    lines = run_worker(tmp_path / "requests", server, chart_step(), exhausted=False)
    recorded = points(lines, "chart_img_requests")
    assert len(recorded) == server.count() == 3  # one point per HTTP request CHART-IMG received
    assert sum(charted("Charts rendered by CHART-IMG, per day", recorded).values()) == 2
    per_account = charted("Quota units spent per account, per day (every request, failed ones too)", recorded)
    assert {account for (account,) in per_account} <= {"requests1", "requests2"}
    assert sum(per_account.values()) == 3
    failed = charted("CHART-IMG requests failed, by code and HTTP status (per hour)", recorded)
    assert failed == Counter({("CHART_API_FAILED", "422"): 1})


def test_the_failure_and_exhaustion_charts_count_their_metrics(exhausted_lines: list[str]) -> None:
    assert points(exhausted_lines, "chart_img_requests") == []  # no quota was there: no request
    failed = charted(
        "CHART_EXPORT steps FAILED, by error code (per hour)",
        points(exhausted_lines, "chart_export_steps_failed"),
    )
    assert failed == Counter({("CHART_API_LIMIT_EXCEEDED",): 1})
    exhausted = points(exhausted_lines, "chart_img_accounts_exhausted")
    assert charted("Steps that found every CHART-IMG account exhausted (per hour)", exhausted) == Counter(
        {(): 1}
    )


def test_each_dashboard_chart_is_on_a_metric_deploy_creates_and_its_labels() -> None:
    for title, series in dashboard_charts().items():
        [name] = [
            n
            for n in ("chart_img_requests", "chart_export_steps_failed", "chart_img_accounts_exhausted")
            if f'metric.type="logging.googleapis.com/user/{n}"' in series["filter"]
        ]
        labels = {f"metric.label.{label['key']}" for label in metric(name)["metricDescriptor"]["labels"]}
        assert set(series["aggregation"].get("groupByFields", [])) <= labels, title
        named = {word.split("=")[0] for word in series["filter"].split() if word.startswith("metric.label.")}
        assert named <= labels, title
