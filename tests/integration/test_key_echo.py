"""A CHART-IMG that echoes the key, in any form, in its error body (the stand-in's `echo_key`),
with the real HTTP client on real sockets: nothing the worker keeps or says afterwards holds
the key in any form (tests/harness/secret_scan.leaks) — not the step's failure, not the log,
not the reason the usage store records for a disabled key.

Keys hold the characters that JSON and URLs escape (`/ " \\ + % = &`), so their JSON-escaped
and URL-encoded forms differ from the key itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import ChartImgServer, FakeClock, chart_call, find_secrets
from harness.logs import LogCapture
from harness.secret_scan import key_forms
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartFailure, ChartResult
from worker_chart_export.settings import Settings

KEYS = {"acc1": 'k1/"esc\\aped+%2F=&0123456789abcdef', "acc2": "k2/+%=&\\u0041zyxwvutsrqponmlkjih"}
FORMS = list(key_forms(KEYS["acc1"]))


def chart_api(server: ChartImgServer, store: FileUsageStore, clock: FakeClock) -> Any:
    for account_id, key in KEYS.items():
        server.add_account(account_id, key=key)
    settings = Settings(
        charts_api_mode="real",
        chart_img_base_url=server.base_url,
        chart_img_accounts_json=SecretStr(json.dumps([{"id": a, "apiKey": k} for a, k in KEYS.items()])),
        chart_img_request_timeout_seconds=5.0,
        chart_img_rate_per_second=50.0,
        chart_img_burst=20,
        charts_fixtures_dir=Path("/nonexistent"),
    )
    policy = RetryPolicy(backoff=Backoff(attempts=None, base=0.5, cap=4.0))
    return build_chart_api(settings, store, seams=Seams(clock=clock, retry_policy=policy))


def render(api: Any, clock: FakeClock, symbol: str) -> ChartResult:
    with api.for_step([], Budget.starting_now(60.0, clock)) as step:
        result: ChartResult = step.render(chart_call("tpl", symbol=symbol))
    return result


@pytest.mark.parametrize("form", FORMS)
def test_a_key_echoed_in_any_form_leaves_no_trace(
    chart_img_server: ChartImgServer, log_capture: LogCapture, tmp_path: Path, form: str
) -> None:
    clock = FakeClock()
    store = FileUsageStore(tmp_path / "usage.json")
    api = chart_api(chart_img_server, store, clock)
    # a final answer about the request, a 429 nobody documents, and the key refused twice
    echo: dict[str, Any] = {"undocumented": True, "echo_key": (form, "verbatim")}
    chart_img_server.script(symbol="X:FINAL", status=422, message="Bad", **echo)
    chart_img_server.script(symbol="X:RATE", status=429, message="Slow", **echo)
    for key in KEYS.values():
        chart_img_server.script(key=key, status=401, message="No", **echo)
    results = [render(api, clock, symbol) for symbol in ("X:FINAL", "X:RATE", "X:A", "X:B")]

    assert all(isinstance(r, ChartFailure) for r in results)
    assert {r.status for r in chart_img_server.requests} == {422, 429, 401}
    docs = store.read_all()
    assert all(docs[a].get("disabled") for a in KEYS)  # each key refused twice: its reason recorded
    final = results[0]
    assert isinstance(final, ChartFailure) and "<redacted>" in final.error.message
    texts = [log_capture.text, json.dumps(docs)]
    texts += [json.dumps(r.error.to_dict()) for r in results if isinstance(r, ChartFailure)]
    assert find_secrets(texts, KEYS.values()) == []
