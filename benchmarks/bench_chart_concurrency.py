"""Concurrent rendering of one step's charts against the local CHART-IMG stand-in.

docs/design.md, "Charts, artifacts and the outcome" and "Shared pacing": a step with N
templates should take about as long as its slowest chart, not the sum, yet never faster than
each account's plan allows. Three scenarios, 8 templates, a server that takes 300 ms per
chart. Each run is one whole step through `execute_step` (claim, render in real mode over
real HTTP on 127.0.0.1, PNG writes, manifest, finalize), on the local adapters so that only
CHART-IMG's latency and pacing are in the measurement:

1. concurrency 8, three accounts paced far above need: bound = one latency (target <= 1.15);
2. concurrency 1, same accounts: for comparison (sequential would be ~8.0);
3. concurrency 8, one BASIC account (1/s burst 3, enforced by the server with 429s):
   bound = (8 - 3) / 1 s + latency = 5.3 s (target <= 1.15, zero 429s).

    .venv/bin/python benchmarks/bench_chart_concurrency.py [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.builders import chart_step_for
from harness.chart_img_server import new_key
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.local import LocalArtifactStore, LocalFlowRunStore, LocalTemplateSource
from worker_chart_export.bootstrap import build_chart_api, step_limits
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.logs import configure_logging
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.settings import ChartsApiMode, Settings
from worker_chart_export.testing import InMemoryUsageStore

REPO = Path(__file__).resolve().parents[1]
LATENCY = 0.3
TEMPLATES = 8
TARGET = 1.15


@dataclass(frozen=True)
class Scenario:
    name: str
    concurrency: int
    accounts: int
    rate: float  # per account, client config and server limit alike
    burst: int
    bound: float  # the best wall time the plan allows
    target: float | None


class StandIn:
    """The CHART-IMG stand-in in a process of its own (see chart_img_server.serve_from_stdin)."""

    def __init__(self, scenario: Scenario) -> None:
        self.accounts = [
            {"id": f"acc{i}", "apiKey": new_key(), "ratePerSecond": scenario.rate, "burst": scenario.burst}
            for i in range(1, scenario.accounts + 1)
        ]
        specs = [f"--account={a['id']}={a['apiKey']}:{scenario.rate}:{scenario.burst}" for a in self.accounts]
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "harness" / "chart_img_server.py"),
                f"--latency={LATENCY}",
                *specs,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()

    def finish(self) -> list[int | None]:
        """Stops the server; every status it answered."""
        out, _ = self.process.communicate("", timeout=30)
        return [status for statuses in json.loads(out).values() for status in statuses]


def raw_floor() -> float:
    """8 bare concurrent httpx posts: what the machine and the stand-in cost with no worker code."""
    server = StandIn(Scenario("raw", 8, 1, 100.0, 20, LATENCY, None))
    key = server.accounts[0]["apiKey"]
    with httpx.Client(limits=httpx.Limits(max_connections=TEMPLATES)) as client:

        def post(i: int) -> int:
            body = {"symbol": "BINANCE:BTCUSDT", "interval": "1h", "width": 800 + i}
            return client.post(
                f"{server.base_url}/v2/tradingview/advanced-chart", json=body, headers={"x-api-key": key}
            ).status_code

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=TEMPLATES) as pool:
            list(pool.map(post, range(TEMPLATES)))
        wall = time.monotonic() - started
    server.finish()
    return wall


def run_once(scenario: Scenario) -> tuple[float, int, int]:
    """(wall seconds, items, 429s answered by the stand-in) on a fresh stand-in and accounts."""
    server = StandIn(scenario)
    try:
        accounts = server.accounts
        settings = Settings(
            charts_api_mode=ChartsApiMode.REAL,
            chart_img_base_url=server.base_url,
            chart_img_accounts_json=SecretStr(json.dumps(accounts)),
            chart_concurrency=scenario.concurrency,
        )
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            template = json.loads((REPO / "chart-templates" / "price_psar_adi_v1.json").read_text())
            (root / "templates").mkdir()
            for i in range(TEMPLATES):
                (root / "templates" / f"tpl_{i}.json").write_text(json.dumps({**template, "id": f"tpl_{i}"}))
            step = chart_step_for([f"tpl_{i}" for i in range(TEMPLATES)])
            source = root / "flow_run.json"
            source.write_text(
                json.dumps(
                    {
                        "runId": "bench",
                        "flowKey": "bench",
                        "status": "RUNNING",
                        "scope": {"symbol": "BTCUSDT"},
                        "steps": {"charts": step},
                    }
                )
            )
            api: Any = build_chart_api(settings, InMemoryUsageStore(), seams=Seams(SYSTEM_CLOCK))
            ports = Ports(
                flow_runs=LocalFlowRunStore(source, root / "state.json"),
                templates=LocalTemplateSource(root / "templates"),
                artifacts=LocalArtifactStore(root / "gcs", "bench"),
                chart_api=api,
            )
            started = time.monotonic()
            report = execute_step(
                "bench", "charts", ports=ports, limits=step_limits(settings), clock=SYSTEM_CLOCK
            )
            wall = time.monotonic() - started
            api.close()
        return wall, report.items_count, server.finish().count(429)
    finally:
        if server.process.poll() is None:
            server.process.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (median reported)")
    args = parser.parse_args()
    configure_logging(service="bench", env="bench", stream=io.StringIO())  # keep stdout a table

    rate_bound = (TEMPLATES - 3) / 1.0 + LATENCY
    scenarios = [
        Scenario("8 concurrent, 3 fast accounts", 8, 3, 100.0, 20, LATENCY, TARGET),
        Scenario("sequential (concurrency 1)", 1, 3, 100.0, 20, LATENCY, None),
        Scenario("8 concurrent, 1 BASIC account 1/s b3", 8, 1, 1.0, 3, rate_bound, TARGET),
    ]
    columns = ("bound s", "wall s", "ratio", "target", "ok", "429s")
    widths = (8, 8, 7, 7, 5, 5)
    header = f"{'scenario':40} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True))
    header += "  result"
    print(
        f"CHART-IMG stand-in (own process): {LATENCY * 1000:.0f} ms per chart, {TEMPLATES} templates, ",
        end="",
    )
    print(f"median of {args.runs} runs")
    floor = statistics.median(raw_floor() for _ in range(args.runs))
    print(
        f"floor: {TEMPLATES} bare concurrent httpx posts take {floor:.3f} s "
        f"= {floor / LATENCY:.2f} x {LATENCY} s"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for scenario in scenarios:
        runs = [run_once(scenario) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        ok = min(r[1] for r in runs)
        too_many = max(r[2] for r in runs)
        ratio = wall / scenario.bound
        verdict = "-"
        if scenario.target is not None:
            good = ratio <= scenario.target and ok == TEMPLATES and too_many == 0
            verdict = "PASS" if good else "FAIL"
            failed |= not good
        target = f"{scenario.target:.2f}" if scenario.target else "-"
        print(
            f"{scenario.name:40} {scenario.bound:8.2f} {wall:8.2f} {ratio:7.2f} {target:>7} "
            f"{ok:>5} {too_many:>5}  {verdict}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
