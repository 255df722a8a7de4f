"""A worker that dies between claim and finalize: its step comes back through the reaper,
and the retry pays CHART-IMG only for the charts the dead execution had not written.

The worker runs in real mode against the CHART-IMG stand-in (in this process, so the test
decides when it answers): a symbol scripted with a long latency keeps the charts in flight
while the test SIGKILLs the worker's whole process group, a crash with no finalize. The
lease is the request timeout, here a few seconds; the stack's reaper schedule (every second)
then makes the step READY again, or FAILED with STEP_LEASE_EXPIRED at the last attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.flow_stack import history, log_tails, new_run_id, running_stack, step_status, wait_until
from harness.builders import TEMPLATES_DIR, chart_step, flow_run
from harness.chart_img_server import ChartImgServer, register_templates_from
from worker_chart_export.tools.devstack.stack import WORKER_TARGET, LocalStack

pytestmark = pytest.mark.emulators

LEASE_SECONDS = (
    15.0  # REQUEST_TIMEOUT_SECONDS: the claim's lease (the retry must render within it on a loaded machine)
)
STEP = "charts"
CHARTS_PER_STEP = 3  # chart_step() asks for three templates
TEMPLATES = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]


@dataclass
class CrashStack:
    stack: LocalStack
    chart_img: ChartImgServer


@pytest.fixture(scope="module")
def crash_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrashStack]:
    chart_img = ChartImgServer().start()
    register_templates_from(chart_img, TEMPLATES_DIR)  # to script one template of a step
    key = chart_img.add_account("acct1")
    real_mode = {
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": chart_img.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": key}]),
    }
    try:
        with running_stack(
            tmp_path_factory.mktemp("crash-stack"),
            request_timeout_seconds=LEASE_SECONDS,
            finalize_budget_seconds=3.0,
            extra_env=real_mode,
        ) as stack:
            yield CrashStack(stack, chart_img)
    finally:
        chart_img.stop()


def start_run(stack: LocalStack, symbol: str, **step: Any) -> str:
    run_id = new_run_id(symbol.lower())
    document = flow_run({STEP: chart_step(**step)}, run_id=run_id, symbol=symbol)
    stack.write_flow_run(document)
    return run_id


def run_status(stack: LocalStack, run_id: str) -> Any:
    return (stack.flow_run_ref(run_id).get().to_dict() or {}).get("status")


def crash_while_in_flight(crash: CrashStack, run_id: str, symbol: str) -> None:
    """Wait until the step is claimed and a chart is being rendered, then SIGKILL the worker."""
    stack = crash.stack
    wait_until(
        lambda: (
            step_status(stack, run_id, STEP) == "RUNNING"
            and any(r.symbol == f"BINANCE:{symbol}" for r in crash.chart_img.requests)
        ),
        what=f"{run_id} claimed with a chart in flight; logs:\n{log_tails(stack)}",
    )
    stack.crash_function(WORKER_TARGET)
    assert step_status(stack, run_id, STEP) == "RUNNING"  # nobody finalized it


def settled(stack: LocalStack, run_id: str, final: str) -> None:
    """The version that ended the step has reached advance_flow's recorded deliveries."""
    wait_until(
        lambda: history(stack, run_id, STEP)[-1:] == [final],
        what=f"{run_id}'s {final} version delivered to advance_flow",
    )


def test_a_crashed_execution_is_reaped_after_its_lease_and_the_retry_succeeds(
    crash_stack: CrashStack,
) -> None:
    stack, symbol = crash_stack.stack, "ETHUSDT"
    crash_stack.chart_img.script(symbol=f"BINANCE:{symbol}", latency=120)
    run_id = start_run(stack, symbol)
    crash_while_in_flight(crash_stack, run_id, symbol)

    crash_stack.chart_img.script(symbol=f"BINANCE:{symbol}")  # answers at once from now on
    stack.start_function(WORKER_TARGET)  # a new instance, as Cloud Run would start
    wait_until(
        lambda: step_status(stack, run_id, STEP) in ("SUCCEEDED", "FAILED"),
        what=f"{run_id} retried; logs:\n{log_tails(stack)}",
    )

    step = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 2), (step.get("error"), log_tails(stack))
    wait_until(lambda: run_status(stack, run_id) == "SUCCEEDED", what=f"{run_id} run SUCCEEDED")
    manifest = json.loads(stack.read_object(f"charts/{run_id}/{STEP}/manifest.json"))
    assert len(manifest["items"]) == 3 and manifest["failures"] == []
    # the reaper took the step back once, keeping its attempt; the retry claimed it again
    # (the router records a delivery when advance_flow answered, after its own write)
    settled(stack, run_id, "SUCCEEDED")
    assert history(stack, run_id, STEP) == ["READY", "RUNNING", "READY", "RUNNING", "SUCCEEDED"]
    assert any(run_id in json.dumps(report["retried"]) for report in stack.reaper_reports)


def test_a_crash_at_the_last_attempt_fails_the_step_with_step_lease_expired(crash_stack: CrashStack) -> None:
    stack, symbol = crash_stack.stack, "SOLUSDT"
    crash_stack.chart_img.script(symbol=f"BINANCE:{symbol}", latency=120)
    run_id = start_run(stack, symbol, attempt=4)  # the claim makes it attempt 5 of 5 (STEP_MAX_ATTEMPTS)
    crash_while_in_flight(crash_stack, run_id, symbol)
    stack.start_function(WORKER_TARGET)

    wait_until(
        lambda: step_status(stack, run_id, STEP) == "FAILED",
        what=f"{run_id} FAILED; logs:\n{log_tails(stack)}",
    )
    wait_until(lambda: run_status(stack, run_id) == "FAILED", what=f"{run_id} run FAILED")
    step = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
    assert step["attempt"] == 5 and step["error"]["code"] == "STEP_LEASE_EXPIRED"
    settled(stack, run_id, "FAILED")
    assert history(stack, run_id, STEP) == ["READY", "RUNNING", "FAILED"]
    assert any(run_id in json.dumps(report["failed"]) for report in stack.reaper_reports)


def calls_for(crash: CrashStack, symbol: str) -> list[str | None]:
    return [r.template for r in crash.chart_img.requests if r.symbol == f"BINANCE:{symbol}"]


def test_the_retry_of_a_crashed_step_calls_chart_img_only_for_the_charts_not_yet_written(
    crash_stack: CrashStack,
) -> None:
    """Kill the worker after k = 2 of n = 3 PNGs are written, reap, run again: exactly
    n - k = 1 call reaches CHART-IMG, and the manifest lists the k PNGs as they were written."""
    stack, symbol, slow = crash_stack.stack, "ADAUSDT", TEMPLATES[2]
    crash_stack.chart_img.script(template=slow, latency=120)
    run_id = start_run(stack, symbol)
    folder = f"charts/{run_id}/{STEP}/"
    wait_until(
        lambda: len(stack.objects(folder)) == 2 and slow in calls_for(crash_stack, symbol),
        what=f"{run_id}: two PNGs written, the third chart in flight; logs:\n{log_tails(stack)}",
    )
    written = stack.objects(folder)
    stack.crash_function(WORKER_TARGET)
    before = len(calls_for(crash_stack, symbol))
    assert before == 3 and step_status(stack, run_id, STEP) == "RUNNING"

    crash_stack.chart_img.script(template=slow)  # answers at once from now on
    stack.start_function(WORKER_TARGET)
    wait_until(
        lambda: step_status(stack, run_id, STEP) in ("SUCCEEDED", "FAILED"),
        what=f"{run_id} retried; logs:\n{log_tails(stack)}",
    )

    step = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 2), (step.get("error"), log_tails(stack))
    assert calls_for(crash_stack, symbol)[before:] == [slow]  # n - k calls on the retry
    manifest = json.loads(stack.read_object(f"{folder}manifest.json"))
    items = {item["chartTemplateId"]: item for item in manifest["items"]}
    assert sorted(items) == sorted(TEMPLATES) and manifest["failures"] == []
    reused = sorted(i["png_gcs_uri"] for i in items.values() if i["meta"].get("reused") is True)
    assert reused == [f"gs://{stack.bucket}/{name}" for name in written]
    assert "reused" not in items[slow]["meta"]
