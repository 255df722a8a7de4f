"""An instance delivers the capacity it is configured for: THREADS steps at once, each with
CHART_CONCURRENCY charts in flight, against the CHART-IMG stand-in over real sockets.

The stand-in holds every answer until the whole expected crowd is in flight at once (or a
generous latency passes), so the count, not the clock, decides: an instance that can only
keep fewer calls open never reaches the peak.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.chart_img_server import ChartImgServer, chart_call, peak_in_flight_of
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.types import ChartResult, ChartSuccess
from worker_chart_export.settings import load_settings
from worker_chart_export.testing import InMemoryUsageStore

THREADS, CHART_CONCURRENCY = 4, 8
SYMBOL = "BINANCE:BTCUSDT"


def served_chart_api(
    server: ChartImgServer, tmp_path: Path, store: InMemoryUsageStore, environment: Callable[..., None]
) -> Any:
    """The chart API a served instance builds, from the environment deploy.sh sets."""
    accounts = [{"id": f"acc{i}", "apiKey": server.add_account(f"acc{i}")} for i in range(CHART_CONCURRENCY)]
    environment(
        THREADS=str(THREADS),
        CHART_CONCURRENCY=str(CHART_CONCURRENCY),
        CHARTS_API_MODE="real",
        CHART_IMG_BASE_URL=server.base_url,
        CHART_IMG_ACCOUNTS_JSON=json.dumps(accounts),
        CHART_IMG_RATE_PER_SECOND="100",
        CHART_IMG_BURST="50",
        CHART_IMG_DAILY_LIMIT="1000",
        CHART_IMG_REQUEST_TIMEOUT_SECONDS="10",
        CHARTS_FIXTURES_DIR=str(tmp_path),
    )
    return build_chart_api(load_settings(), store, seams=Seams(SYSTEM_CLOCK))


def run_step(api: Any, step: int) -> list[ChartResult]:
    """As execute.py runs a step: its first wave reserved at once, its charts from a pool."""
    calls = [chart_call(f"tpl_{i}", run_id=f"run-{step}", symbol=SYMBOL) for i in range(CHART_CONCURRENCY)]
    budget = Budget.starting_now(20.0, SYSTEM_CLOCK)
    with api.for_step(calls, budget) as step, ThreadPoolExecutor(max_workers=CHART_CONCURRENCY) as pool:
        futures = [pool.submit(contextvars.copy_context().run, step.render, c) for c in calls]
        return [f.result() for f in futures]


def test_every_chart_of_every_step_an_instance_runs_is_in_flight_at_once(
    chart_img_server: ChartImgServer,
    tmp_path: Path,
    log_capture: LogCapture,
    settings_environment: Callable[..., None],
) -> None:
    crowd = THREADS * CHART_CONCURRENCY
    chart_img_server.script(symbol=SYMBOL, latency=3.0, hold_until_in_flight=crowd)
    store = InMemoryUsageStore()
    api = served_chart_api(chart_img_server, tmp_path, store, settings_environment)
    try:
        with ThreadPoolExecutor(max_workers=THREADS) as steps:  # gunicorn's threads
            results = [r for step in steps.map(lambda s: run_step(api, s), range(THREADS)) for r in step]
    finally:
        api.close()
    assert chart_img_server.peak_in_flight() == crowd
    assert peak_in_flight_of(chart_img_server.request_log()) == crowd
    assert all(isinstance(r, ChartSuccess) for r in results)
    # one unit per call that reached CHART-IMG: no retry, no unit spent waiting
    units = sum(doc["usageToday"] for doc in store.snapshot().values())
    assert units == chart_img_server.count() == crowd
