"""Issue 40's "Done when", through the served worker: a step mixing Advanced Chart and layout
templates SUCCEEDS on the emulators against the CHART-IMG stand-in, each call on its endpoint
with the right headers (the stand-in's log), the TradingView sessions nowhere else; and a
private layout without a session, a layout refused "Layout Forbidden" and an unknown layout
each end their chart with a clear code, no key set aside, the step's other charts rendered.

The stack of `stack up` (Firestore emulator with real triggers, fake-gcs-server, the served
worker in real mode, advance_flow, the reaper). Its templates are the bundled ones (one of
them the shared layout my_tradingview_layout_v1, 37wLAGgd) and four layout templates written
here. A layout call's timeout is 10 s (the step's charts have 16 s): the stand-in answers at
once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.flow_stack import log_tails, new_run_id, running_stack, step_status, wait_until
from harness.builders import chart_step_for, flow_run
from harness.chart_img_server import ChartImgServer, new_key, register_templates_from
from harness.secret_scan import leaks
from worker_chart_export import bundled
from worker_chart_export.tools.devstack.stack import LocalStack

pytestmark = pytest.mark.emulators

STEP = "charts"
SHARED = "my_tradingview_layout_v1"  # bundled: layout 37wLAGgd, shared
LAYOUTS = {  # template id -> its layout
    "private_named_v1": {"layoutId": "Private1", "private": True, "session": "mine"},
    "private_bare_v1": {"layoutId": "Private2", "private": True},  # no session anywhere
    "forbidden_layout_v1": {"layoutId": "Locked01"},
    "unknown_layout_v1": {"layoutId": "Missing1"},
}


def layout_template(template_id: str, layout: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": template_id,
        "description": f"layout {layout['layoutId']}",
        "chartImgSymbolTemplate": "BINANCE:{symbol}",
        "layout": {**layout, "request": {"width": 800, "height": 600}},
    }


@pytest.fixture(scope="module")
def layouts(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalStack, ChartImgServer, list[str]]]:
    chart_img = ChartImgServer().start()
    keys = [new_key(), new_key()]
    for index, key in enumerate(keys, start=1):
        chart_img.add_account(f"acct{index}", key=key)
    mine = chart_img.add_session("mine")
    chart_img.add_layout("37wLAGgd")
    chart_img.add_layout("Private1", private=True, sessions=["mine"])
    chart_img.add_layout("Private2", private=True, sessions=["mine"])
    chart_img.add_layout("Locked01", forbidden=True)
    register_templates_from(chart_img, bundled.chart_templates_dir())
    real_mode = {
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": chart_img.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps(
            [{"id": f"acct{i}", "apiKey": k} for i, k in enumerate(keys, 1)]
        ),
        "CHART_IMG_SESSIONS_JSON": json.dumps(
            [{"id": "mine", "sessionId": mine[0], "sessionIdSign": mine[1]}]
        ),
        "CHART_IMG_LAYOUT_TIMEOUT_SECONDS": "10",
    }
    try:
        with running_stack(
            tmp_path_factory.mktemp("layout-stack"), extra_env=real_mode, request_timeout_seconds=25.0
        ) as stack:
            for template_id, layout in LAYOUTS.items():
                template = layout_template(template_id, layout)
                stack.db.collection("chart_templates").document(template_id).set(template)
                chart_img.register_template(
                    template_id, template["layout"]["request"], layout_id=layout["layoutId"]
                )
            yield stack, chart_img, [*keys, *mine]
    finally:
        chart_img.stop()


def run_step(stack: LocalStack, templates: list[str], min_images: int, symbol: str) -> dict[str, Any]:
    run_id = new_run_id(symbol.lower())
    stack.write_flow_run(
        flow_run({STEP: chart_step_for(templates, min_images=min_images)}, run_id=run_id, symbol=symbol)
    )
    wait_until(
        lambda: step_status(stack, run_id, STEP) in ("SUCCEEDED", "FAILED"),
        what=f"{run_id} finished; logs:\n{log_tails(stack)}",
    )
    step: dict[str, Any] = (stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
    return {"runId": run_id, **step}


def manifest_of(stack: LocalStack, run_id: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(stack.read_object(f"charts/{run_id}/{STEP}/manifest.json"))
    return document


def calls_of(chart_img: ChartImgServer, symbol: str) -> dict[str | None, list[dict[str, Any]]]:
    """The stand-in's log of this run's calls, by the template it recognised."""
    by_template: dict[str | None, list[dict[str, Any]]] = {}
    for record in chart_img.request_log():
        if record["symbol"] == f"BINANCE:{symbol}":
            by_template.setdefault(record["template"], []).append(record)
    return by_template


def test_a_step_mixing_advanced_and_layout_charts_succeeds_each_call_on_its_endpoint(
    layouts: tuple[LocalStack, ChartImgServer, list[str]],
) -> None:
    stack, chart_img, secrets = layouts
    templates = ["price_psar_adi_v1", SHARED, "private_named_v1", "momentum_rsi_macd_v1"]
    step = run_step(stack, templates, min_images=4, symbol="MIXUSDT")
    assert step["status"] == "SUCCEEDED", (step.get("error"), log_tails(stack))

    calls = calls_of(chart_img, "MIXUSDT")
    assert set(calls) == set(templates)
    seen = {
        t: [(c["endpoint"], c["layout_id"], c["session"], len(c["session_headers"])) for c in calls[t]]
        for t in templates
    }
    assert seen == {
        "price_psar_adi_v1": [("advanced-chart", None, None, 0)],
        "momentum_rsi_macd_v1": [("advanced-chart", None, None, 0)],
        SHARED: [("layout-chart", "37wLAGgd", None, 0)],
        "private_named_v1": [("layout-chart", "Private1", "mine", 2)],
    }

    manifest = manifest_of(stack, step["runId"])
    meta = {item["chartTemplateId"]: item["meta"] for item in manifest["items"]}
    assert (meta[SHARED]["endpoint"], meta[SHARED]["layoutId"]) == ("layout-chart", "37wLAGgd")
    assert (meta["private_named_v1"]["endpoint"], meta["private_named_v1"]["layoutId"]) == (
        "layout-chart",
        "Private1",
    )
    assert meta["price_psar_adi_v1"]["endpoint"] == "advanced-chart"

    # the keys and the session's two values: in the stand-in's headers only
    written = [
        json.dumps(stack.flow_run_ref(step["runId"]).get().to_dict(), default=str),
        json.dumps(manifest),
    ]
    written += [json.dumps(chart_img.request_log())]
    written += [child.log_tail(10**7) for child in stack.supervisor.children]
    written += [
        json.dumps(d.to_dict(), default=str) for d in stack.db.collection("chart_img_accounts_usage").stream()
    ]
    assert leaks(written, secrets) == []


def test_layouts_refused_end_only_their_charts_with_a_clear_code_and_no_key_set_aside(
    layouts: tuple[LocalStack, ChartImgServer, list[str]],
) -> None:
    stack, chart_img, _ = layouts
    refused = ["private_bare_v1", "forbidden_layout_v1", "unknown_layout_v1"]
    templates = ["price_psar_adi_v1", *refused, "price_ema_volume_v1"]
    step = run_step(stack, templates, min_images=2, symbol="REFUSEDUSDT")
    assert step["status"] == "SUCCEEDED", (step.get("error"), log_tails(stack))

    manifest = manifest_of(stack, step["runId"])
    assert sorted(item["chartTemplateId"] for item in manifest["items"]) == [
        "price_ema_volume_v1",
        "price_psar_adi_v1",
    ]
    failures = {f["request"]["chartTemplateId"]: f["error"] for f in manifest["failures"]}
    assert {t: (e["code"], e["details"]["errorKind"]) for t, e in failures.items()} == {
        "private_bare_v1": ("VALIDATION_FAILED", "layout_session_missing"),
        "forbidden_layout_v1": ("CHART_API_FAILED", "layout_forbidden"),
        "unknown_layout_v1": ("CHART_API_FAILED", "layout_not_found"),
    }
    assert (
        "Private2 is private and no TradingView session is configured"
        in failures["private_bare_v1"]["message"]
    )
    assert "refused TradingView layout Locked01" in failures["forbidden_layout_v1"]["message"]
    assert "found no TradingView layout Missing1" in failures["unknown_layout_v1"]["message"]

    calls = calls_of(chart_img, "REFUSEDUSDT")
    assert "private_bare_v1" not in calls  # never asked for
    assert [c["status"] for c in calls["forbidden_layout_v1"]] == [403]  # once: final, no other key tried
    assert [c["status"] for c in calls["unknown_layout_v1"]] == [404]
    usage = {d.id: d.to_dict() or {} for d in stack.db.collection("chart_img_accounts_usage").stream()}
    assert set(usage) == {"acct1", "acct2"}
    for account, document in usage.items():  # core/chart_img/set_aside.py's fields
        assert not {"disabled", "disabledUntil", "disabledReason", "coolUntil"} & set(document), (
            account,
            document,
        )


def test_stack_up_against_its_own_stand_in_renders_the_bundled_layout_template(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`stack up --charts-api-mode stand-in`: its stand-in knows the bundled templates' layouts
    and the stack's short budget holds a layout call."""
    with running_stack(tmp_path_factory.mktemp("stand-in-stack"), charts_api_mode="real") as stack:
        step = run_step(stack, ["price_psar_adi_v1", SHARED], min_images=2, symbol="STACKUSDT")
        assert step["status"] == "SUCCEEDED", (step.get("error"), log_tails(stack))
        items = {item["chartTemplateId"]: item["meta"] for item in manifest_of(stack, step["runId"])["items"]}
        assert (items[SHARED]["endpoint"], items[SHARED]["layoutId"]) == ("layout-chart", "37wLAGgd")
