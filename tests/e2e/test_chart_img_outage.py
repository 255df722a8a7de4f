"""An outage of CHART-IMG costs no quota (issue 25, item 2): while its port refuses every
connection, each attempt's unit is given back, so the day's count stays what CHART-IMG could
have counted; once it answers again, the next step renders on the same account.

The stack of `stack up` (Firestore emulator with real triggers, fake-gcs-server, the served
worker in real mode, advance_flow, the reaper), the worker pointed at the CHART-IMG stand-in's
port while the stand-in holds that port without listening (a connect is refused, as an
unreachable CHART-IMG's would be), then listens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.flow_stack import log_tails, new_run_id, running_stack, step_status, wait_until
from harness.builders import chart_step, flow_run
from harness.chart_img_server import ChartImgServer, new_key
from harness.midnight import now_with_room_in_the_day
from worker_chart_export.core.chart_img.usage import window_start
from worker_chart_export.tools.devstack.stack import LocalStack

pytestmark = pytest.mark.emulators

STEP = "charts"
OUTAGE_STEPS = 6
CHARTS_PER_STEP = 3  # chart_step() asks for three templates
USED_BEFORE = 5  # units the account had used today before the outage


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, ChartImgServer, str]]:
    chart_img = ChartImgServer(refusing_connections=True).start()
    key = new_key()
    real_mode = {
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": chart_img.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": key}]),
    }
    try:
        with running_stack(tmp_path_factory.mktemp("outage-stack"), extra_env=real_mode) as stack:
            yield stack, chart_img, key
    finally:
        chart_img.stop()


def start_run(stack: LocalStack, symbol: str) -> str:
    run_id = new_run_id(symbol.lower())
    stack.write_flow_run(flow_run({STEP: chart_step()}, run_id=run_id, symbol=symbol))
    return run_id


def finished(stack: LocalStack, run_id: str) -> bool:
    return step_status(stack, run_id, STEP) in ("SUCCEEDED", "FAILED")


def usage(stack: LocalStack) -> dict[str, Any]:
    return stack.db.collection("chart_img_accounts_usage").document("acct1").get().to_dict() or {}


def test_an_outage_of_any_length_leaves_the_days_count_as_chart_img_could_count_it(
    outage: tuple[LocalStack, ChartImgServer, str],
) -> None:
    stack, chart_img, key = outage
    today = window_start(now_with_room_in_the_day())
    stack.db.collection("chart_img_accounts_usage").document("acct1").set(
        {"usageToday": USED_BEFORE, "windowStart": today}
    )

    runs = [start_run(stack, f"OUT{i}USDT") for i in range(OUTAGE_STEPS)]
    for run_id in runs:
        wait_until(lambda run_id=run_id: finished(stack, run_id), what=f"{run_id}; logs:\n{log_tails(stack)}")

    attempts = 0
    for run_id in runs:
        step = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
        assert step["status"] == "FAILED", step
        manifest = json.loads(stack.read_object(f"charts/{run_id}/{STEP}/manifest.json"))
        assert len(manifest["failures"]) == CHARTS_PER_STEP and manifest["items"] == []
        for failure in manifest["failures"]:
            details = failure["error"]["details"]
            assert (details["errorKind"], details["unitGivenBack"]) == ("connection", True), details
            attempts += details["attempts"]
    assert attempts >= OUTAGE_STEPS * CHARTS_PER_STEP
    doc = usage(stack)
    assert doc["windowStart"] == today
    assert (doc["usageToday"], doc["refundedToday"]) == (USED_BEFORE, attempts)  # nothing counted
    assert chart_img.requests == []  # nothing ever reached it

    chart_img.add_account("acct1", key=key)
    chart_img.accept_connections()  # CHART-IMG is back
    run_id = start_run(stack, "BACKUSDT")
    wait_until(lambda: finished(stack, run_id), what=f"{run_id}; logs:\n{log_tails(stack)}")
    step = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
    assert step["status"] == "SUCCEEDED", (step.get("error"), log_tails(stack))
    assert [r.status for r in chart_img.requests] == [200] * CHARTS_PER_STEP
    assert usage(stack)["usageToday"] == USED_BEFORE + CHARTS_PER_STEP
