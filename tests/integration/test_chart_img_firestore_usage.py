"""Three steps rendering at once, each as its own instance (own limiter), sharing the
Firestore emulator's chart_img_accounts_usage: every HTTP call is counted exactly once."""

from __future__ import annotations

import contextvars
import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest
from google.cloud import firestore
from pydantic import SecretStr

from harness.chart_img_server import ChartImgServer, chart_call, find_secrets
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.firestore import FirestoreUsageStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.types import ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.settings import Settings

pytestmark = pytest.mark.emulators

# Each step is its own instance: their reservations on one usage document really contend
# across processes, and the emulator settles each conflict in ~2 s (the client's transaction
# retry backoff), so the steps are kept small.
STEPS, TEMPLATES = 3, 4


def usage_docs(client: firestore.Client) -> list[Any]:
    return list(client.collection("chart_img_accounts_usage").stream())


@pytest.mark.parametrize("prepared", [False, True], ids=["one-by-one", "wave"])
def test_concurrent_steps_lose_no_increment(
    firestore_client: firestore.Client,
    chart_img_server: ChartImgServer,
    log_capture: LogCapture,
    prepared: bool,
) -> None:
    accounts = [{"id": a, "apiKey": chart_img_server.add_account(a)} for a in ("acc1", "acc2", "acc3")]
    chart_img_server.script(symbol="BINANCE:ETHUSDT", fail_times=4)  # a few retried calls
    settings = Settings(
        charts_api_mode="real",
        chart_img_base_url=chart_img_server.base_url,
        chart_img_accounts_json=SecretStr(json.dumps(accounts)),
        chart_img_rate_per_second=100.0,
        chart_img_burst=30,
        chart_concurrency=TEMPLATES,
    )
    # one ChartApi per step: separate instances share nothing but Firestore
    stores = [FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK) for _ in range(STEPS)]
    apis: list[Any] = [build_chart_api(settings, store, seams=Seams(SYSTEM_CLOCK)) for store in stores]
    budget = Budget.starting_now(60.0, SYSTEM_CLOCK)
    calls = [
        [
            chart_call(f"tpl_{t}", symbol="BINANCE:BTCUSDT" if t else "BINANCE:ETHUSDT", run_id=f"run-{s}")
            for t in range(TEMPLATES)
        ]
        for s in range(STEPS)
    ]
    waves = ExitStack()
    if prepared:  # warm instances: versions known, each step's first wave in one BatchWrite
        for account in accounts:  # as in production: the documents exist
            firestore_client.collection("chart_img_accounts_usage").document(account["id"]).set({})
        for store in stores:
            store.prime()
    # each step's chart session; with `prepared`, its first wave reserved on opening
    sessions = [
        waves.enter_context(api.for_step(step_calls if prepared else [], budget))
        for api, step_calls in zip(apis, calls, strict=True)
    ]
    if prepared:  # the first wave landed; the others found versions changed and reserve one by one
        assert sum(doc.to_dict().get("usageToday", 0) for doc in usage_docs(firestore_client)) >= TEMPLATES
    with waves, ThreadPoolExecutor(max_workers=STEPS * TEMPLATES) as pool:
        futures = [
            pool.submit(contextvars.copy_context().run, session.render, call)
            for session, step_calls in zip(sessions, calls, strict=True)
            for call in step_calls
        ]
        results: list[ChartResult] = [f.result() for f in futures]
    for api in apis:
        api.close()

    docs = {d.id: d.to_dict() for d in usage_docs(firestore_client)}
    used = {a: doc["usageToday"] for a, doc in docs.items()}
    assert used == {a: chart_img_server.count(a) for a in used}
    assert sum(used.values()) == chart_img_server.count() >= STEPS * TEMPLATES
    # the 4 scripted 500s fall on the 3 ETH requests: at most one of them runs out of attempts
    failures = [r.error for r in results if isinstance(r, ChartFailure)]
    assert len(failures) <= 1, failures
    assert all(f.details.get("httpStatus") == 500 for f in failures), failures
    assert sum(isinstance(r, ChartSuccess) for r in results) == STEPS * TEMPLATES - len(failures)
    assert (
        find_secrets([log_capture.text, json.dumps(docs), *map(repr, results)], chart_img_server.keys) == []
    )
