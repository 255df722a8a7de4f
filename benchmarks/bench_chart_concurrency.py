"""Concurrent rendering of one step's charts against the local CHART-IMG stand-in.

DESIGN §4.5: a step with N templates should take about as long as its slowest chart, not
the sum, yet never faster than each account's plan allows. Three scenarios, 8 templates,
a server that takes 300 ms per chart, rendered the way execute.py does (a ThreadPoolExecutor
over `ChartApi.render`, real mode, real HTTP on 127.0.0.1):

1. concurrency 8, three accounts paced far above need: bound = one latency (target <= 1.15);
2. concurrency 1, same accounts: for comparison (sequential would be ~8.0);
3. concurrency 8, one BASIC account (1/s burst 3, enforced by the server with 429s):
   bound = (8 - 3) / 1 s + latency = 5.3 s (target <= 1.15, zero 429s).

    .venv/bin/python benchmarks/bench_chart_concurrency.py [--runs 3]
"""

from __future__ import annotations

import argparse
import contextvars
import io
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.chart_img_server import ChartImgServer, chart_call
from worker_chart_export.adapters.chart_img import build_chart_api
from worker_chart_export.adapters.usage_local import InMemoryUsageStore
from worker_chart_export.config import ChartsApiMode, Settings
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.types import ChartSuccess
from worker_chart_export.logs import configure_logging

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


def run_once(scenario: Scenario) -> tuple[float, int, int]:
    """(wall seconds, successes, 429s seen by the server) on a fresh server and accounts."""
    server = ChartImgServer().start()
    try:
        server.script(symbol="BINANCE:BTCUSDT", latency=LATENCY)
        accounts = [
            {
                "id": f"acc{i}",
                "apiKey": server.add_account(f"acc{i}", rate=scenario.rate, burst=scenario.burst),
                "ratePerSecond": scenario.rate,
                "burst": scenario.burst,
            }
            for i in range(1, scenario.accounts + 1)
        ]
        settings = Settings(
            charts_api_mode=ChartsApiMode.REAL,
            chart_img_base_url=server.base_url,
            chart_img_accounts_json=SecretStr(json.dumps(accounts)),
            chart_concurrency=scenario.concurrency,
        )
        api: Any = build_chart_api(settings, InMemoryUsageStore())
        calls = [chart_call(f"tpl_{i}") for i in range(TEMPLATES)]
        budget = Budget.starting_now(settings.step_budget_seconds)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=scenario.concurrency) as pool:
            futures = [pool.submit(contextvars.copy_context().run, api.render, c, budget) for c in calls]
            results = [f.result() for f in futures]
        wall = time.monotonic() - started
        api.close()
        ok = sum(isinstance(r, ChartSuccess) for r in results)
        return wall, ok, server.statuses().count(429)
    finally:
        server.stop()


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
    print(f"CHART-IMG stand-in: {LATENCY * 1000:.0f} ms per chart, {TEMPLATES} templates, ", end="")
    print(f"median of {args.runs} runs")
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
