"""An outage of CHART-IMG longer than a step's budget costs time, never the run (issue 37), and
no quota (issue 25, item 2): while its port refuses every connection, each attempt's unit is
given back and a step that ran out of budget waits (RUNNING, its lease moved to its next
attempt) instead of ending FAILED; the reaper makes it READY again, and once CHART-IMG
answers, every step claimed during the outage ends SUCCEEDED, the day's count what CHART-IMG
counted: the charts it rendered.

The stack of `stack up` (Firestore emulator with real triggers, fake-gcs-server, the served
worker in real mode, advance_flow, the reaper), the worker pointed at the CHART-IMG stand-in's
port while the stand-in holds that port without listening (a connect is refused, as an
unreachable CHART-IMG's would be), then listens. The outage ends on an event, not a clock:
once every step has waited at least once, having spent its budget on refused connections.
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
OUTAGE_STEPS = 4
CHARTS_PER_STEP = 3  # chart_step() asks for three templates
USED_BEFORE = 5  # units the account had used today before the outage
# A step's budget: 12 s of charts (the request's 15 s, less 3 s for the finalize; a fifth of it
# kept for the manifest); its attempts wait 1 s, then 2 s, at most, and it has ten of them.
PATIENCE = {"STEP_RETRY_BASE_SECONDS": "1", "STEP_RETRY_MAX_SECONDS": "2", "STEP_MAX_ATTEMPTS": "10"}


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, ChartImgServer, str]]:
    chart_img = ChartImgServer(refusing_connections=True).start()
    key = new_key()
    real_mode = {
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": chart_img.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": key}]),
        **PATIENCE,
    }
    try:
        with running_stack(
            tmp_path_factory.mktemp("outage-stack"),
            extra_env=real_mode,
            request_timeout_seconds=15.0,
            finalize_budget_seconds=3.0,
        ) as stack:
            yield stack, chart_img, key
    finally:
        chart_img.stop()


def start_run(stack: LocalStack, symbol: str) -> str:
    run_id = new_run_id(symbol.lower())
    stack.write_flow_run(flow_run({STEP: chart_step()}, run_id=run_id, symbol=symbol))
    return run_id


def step_of(stack: LocalStack, run_id: str) -> dict[str, Any]:
    step: dict[str, Any] = (stack.flow_run_ref(run_id).get().to_dict() or {}).get("steps", {}).get(STEP, {})
    return step


def usage(stack: LocalStack) -> dict[str, Any]:
    return stack.db.collection("chart_img_accounts_usage").document("acct1").get().to_dict() or {}


def test_steps_claimed_during_an_outage_longer_than_their_budget_succeed_after_it(
    outage: tuple[LocalStack, ChartImgServer, str],
) -> None:
    stack, chart_img, key = outage
    today = window_start(now_with_room_in_the_day())
    stack.db.collection("chart_img_accounts_usage").document("acct1").set(
        {"usageToday": USED_BEFORE, "windowStart": today}
    )
    runs = [start_run(stack, f"OUT{i}USDT") for i in range(OUTAGE_STEPS)]

    # the outage lasts until every step has spent a budget on it and waits (or, as before
    # issue 37, has ended FAILED: which the next assertion refuses)
    for run_id in runs:
        wait_until(
            lambda run_id=run_id: (
                step_of(stack, run_id).get("waits") or step_status(stack, run_id, STEP) == "FAILED"
            ),
            what=f"{run_id} waiting",
        )
    for run_id in runs:
        step = step_of(stack, run_id)
        assert step["status"] in ("RUNNING", "READY"), (step, log_tails(stack))  # never FAILED
        first_wait = step["waits"][0]["error"]
        assert first_wait["code"] == "CHART_API_FAILED", first_wait
        assert first_wait["message"].startswith("0 of 3 charts rendered"), first_wait
        assert "CHART-IMG could not be reached (connection: ConnectError)" in first_wait["message"], (
            first_wait
        )
    assert usage(stack)["usageToday"] == USED_BEFORE  # every refused attempt's unit given back
    assert chart_img.requests == []  # nothing ever reached it

    chart_img.add_account("acct1", key=key)
    chart_img.accept_connections()  # CHART-IMG is back

    for run_id in runs:
        wait_until(
            lambda run_id=run_id: step_status(stack, run_id, STEP) in ("SUCCEEDED", "FAILED"),
            what=f"{run_id} finished; logs:\n{log_tails(stack)}",
        )
    for run_id in runs:
        step = step_of(stack, run_id)
        assert step["status"] == "SUCCEEDED", (step.get("error"), log_tails(stack))
        assert step["attempt"] >= 2 and len(step["waits"]) >= 1
        manifest = json.loads(stack.read_object(f"charts/{run_id}/{STEP}/manifest.json"))
        assert len(manifest["items"]) == CHARTS_PER_STEP and manifest["failures"] == []
    rendered = [r for r in chart_img.requests if r.status == 200]
    assert len(rendered) == len(chart_img.requests) == OUTAGE_STEPS * CHARTS_PER_STEP  # each chart once
    doc = usage(stack)
    # the day's count is what CHART-IMG counted: the charts it rendered, nothing for the outage
    assert (doc["windowStart"], doc["usageToday"]) == (today, USED_BEFORE + len(rendered))
    assert doc["refundedToday"] > 0
