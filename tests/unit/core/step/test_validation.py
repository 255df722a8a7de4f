"""Every rule of docs/design.md "Validation", one bad input each; the message must name the field."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from harness.builders import chart_step, flow_run, load_templates
from worker_chart_export.core.chart_img.plans import PLANS, AccountPlans, Plan
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.step.validation import ValidatedStep, requested_template_ids, validate_step
from worker_chart_export.core.templates.template_check import StoredTemplate

TEMPLATES = load_templates()

# mock mode's: no layout call to make room for, CHART_IMG_PLAN's default plans, Etc/UTC
LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=30.0)


def run(
    doc: dict[str, Any],
    step_id: str = "charts",
    *,
    run_id: str = "run1",
    templates: dict[str, Any] | None = None,
    plan: Plan = PLANS["BASIC"],
    accounts: tuple[tuple[str, str | None], ...] = (),
) -> ValidatedStep | StepError:
    """`plan`: CHART_IMG_PLAN; `accounts`: each account's id and declared plan (none: mock)."""
    documents = TEMPLATES if templates is None else templates
    return validate_step(
        doc,
        run_id,
        step_id,
        {template_id: StoredTemplate(template_id, d) for template_id, d in documents.items()},
        replace(LIMITS, plans=AccountPlans.of(plan, accounts)),
    )


def problems_of(result: ValidatedStep | StepError) -> list[str]:
    assert isinstance(result, StepError), f"expected a validation failure, got {result}"
    assert result.code is ErrorCode.VALIDATION_FAILED
    assert result.message.startswith("invalid step inputs: ")
    return result.details["problems"]


FORMULA = "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10"  # the docs' one formula example


def test_valid_step_yields_one_call_per_request_in_order() -> None:
    result = run(flow_run({"charts": chart_step()}))
    assert isinstance(result, ValidatedStep)
    assert [c.chart_template_id for c in result.calls] == [
        "price_psar_adi_v1",
        "price_ema_volume_v1",
        "momentum_rsi_macd_v1",
    ]
    call = result.calls[0]
    assert call.chart_img_symbol == "BINANCE:BTCUSDT"
    assert call.body["symbol"] == "BINANCE:BTCUSDT" and call.body["interval"] == "1h"
    assert call.fixture_key == "BINANCE_BTCUSDT__1h__price_psar_adi_v1"
    assert result.min_images == 2 and result.symbol == "BTCUSDT" and result.timeframe == "1h"


@pytest.mark.parametrize(
    ("symbol", "problem"),
    [
        ("btc usdt", "lower-case 'b' at 1"),
        ("BTC USDT", "character U+0020 at 4 is not allowed"),
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        (42, "must be a non-empty string"),
        ("A" * 201, "is 201 characters long, at most 200"),
        (
            "(NASDAQ:MARA+NASDAQ:RIOT",
            "'(' at 1: scope.symbol is the base symbol (e.g. BTCUSDT), not a formula",
        ),
        ("../x", "'/' at 3: scope.symbol is the base symbol, without a slash"),
        ("..X", "'.' at 1 cannot start a symbol"),
        ("BTCUSDT*2", "'*' at 8: scope.symbol is the base symbol (e.g. BTCUSDT), not a formula"),
        ("BTCUSDT-1000", "'-' at 8: scope.symbol is the base symbol (e.g. BTCUSDT), not a formula"),
        ("BINANCE:BTCUSDT", "':' at 8: scope.symbol is the base symbol, without an exchange"),
        ("BTC٤", "character U+0664 at 4 is not allowed (only A-Z 0-9 _ . !)"),
    ],
)
def test_scope_symbol_outside_the_grammar_is_refused(symbol: Any, problem: str) -> None:
    problems = problems_of(run(flow_run({"charts": chart_step()}, symbol=symbol)))
    assert any(p.startswith("scope.symbol:") and problem in p for p in problems), problems


def test_a_resolved_symbol_must_name_an_exchange_once() -> None:
    """The exchange is the template's: scope.symbol with one is refused as scope.symbol, and
    the template that would have doubled it (`BINANCE:NASDAQ:MARA`) is not blamed."""
    problems = problems_of(run(flow_run({"charts": chart_step()}, symbol="NASDAQ:MARA")))
    assert problems == [
        "scope.symbol: 'NASDAQ:MARA': ':' at 7: scope.symbol is the base symbol, without an exchange "
        "(e.g. BTCUSDT); the exchange belongs in the template's chartImgSymbolTemplate (e.g. "
        "BINANCE:{symbol}) (e.g. BTCUSDT, ES1!, BTCUSDT.P)"
    ]
    whole = {
        "whole_v1": {**TEMPLATES["price_psar_adi_v1"], "id": "whole_v1", "chartImgSymbolTemplate": "{symbol}"}
    }
    step = chart_step(inputs={"minImages": 1, "requests": [{"chartTemplateId": "whole_v1"}]})
    problems = problems_of(run(flow_run({"charts": step}, symbol="MARA"), templates=whole))
    assert problems == [
        "chart_templates/whole_v1.chartImgSymbolTemplate: '{symbol}' with scope.symbol 'MARA' gives "
        "'MARA', not a symbol CHART-IMG accepts: 'MARA' at 1 has no exchange: CHART-IMG expects "
        "EXCHANGE:SYMBOL (e.g. BINANCE:BTCUSDT)"
    ]


@pytest.mark.parametrize("symbol", ["BTC/USDT", "CEMEX/CPO", "BTC/USDT*2"])
def test_scope_symbol_is_the_base_symbol_without_a_slash(symbol: str) -> None:
    """Worker contract §4.1: BTC/USDT would reach CHART-IMG as BINANCE:BTC/USDT (a 422, a unit)."""
    step = {"charts": chart_step()}
    [problem] = [p for p in problems_of(run(flow_run(step, symbol=symbol))) if p.startswith("scope.symbol")]
    at = symbol.index("/") + 1
    assert problem == (
        f"scope.symbol: {symbol!r}: '/' at {at}: scope.symbol is the base symbol, without a slash (e.g. "
        "BTCUSDT); a symbol with '/' or a division belongs in the template's chartImgSymbolTemplate "
        "(e.g. BMV:{symbol}/CPO) (e.g. BTCUSDT, ES1!, BTCUSDT.P)"
    )


@pytest.mark.parametrize(
    ("symbol", "first"),
    [
        ("BMV:CEMEX/CPO", "':' at 4"),
        ("(NASDAQ:MARA+NASDAQ:RIOT)/2", "'(' at 1"),
        ("NASDAQ:A/NASDAQ:B", "':' at 7"),
    ],
)
def test_a_formula_or_an_exchange_in_scope_symbol_is_refused_at_its_first_character(
    symbol: str, first: str
) -> None:
    """Worker contract §4.1: the base format; an exchange, a slash, a formula: the template's."""
    step = {"charts": chart_step()}
    [problem] = [p for p in problems_of(run(flow_run(step, symbol=symbol))) if p.startswith("scope.symbol")]
    assert problem.startswith(f"scope.symbol: {symbol!r}: {first}: scope.symbol is the base symbol"), problem


@pytest.mark.parametrize(
    ("symbol_template", "symbol", "sent"),
    [
        ("BMV:{symbol}/CPO", "CEMEX", "BMV:CEMEX/CPO"),
        ("(NASDAQ:{symbol}+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10", "MARA", FORMULA),
        ("BINANCE:{symbol}/BINANCE:ETHUSDT", "BTCUSDT", "BINANCE:BTCUSDT/BINANCE:ETHUSDT"),
    ],
)
def test_slashes_and_formulas_stay_accepted_in_the_template(
    symbol_template: str, symbol: str, sent: str
) -> None:
    template = {**TEMPLATES["price_psar_adi_v1"], "id": "slash_v1", "chartImgSymbolTemplate": symbol_template}
    step = chart_step(inputs={"minImages": 1, "requests": [{"chartTemplateId": "slash_v1"}]})
    result = run(flow_run({"charts": step}, symbol=symbol), templates={"slash_v1": template})
    assert isinstance(result, ValidatedStep), result
    assert [c.chart_img_symbol for c in result.calls] == [sent] and result.calls[0].body["symbol"] == sent


@pytest.mark.parametrize("scope", [None, "BTCUSDT", ["BTCUSDT"]])
def test_scope_must_be_an_object(scope: Any) -> None:
    doc = flow_run({"charts": chart_step()})
    doc["scope"] = scope
    problems = problems_of(run(doc))
    assert any(p.startswith("scope: must be an object with a symbol") for p in problems), problems


@pytest.mark.parametrize("timeframe", ["1H", "2d", "", None, 60, "1h ", "10m", "1d"])
def test_timeframe_must_be_a_chart_img_interval(timeframe: Any) -> None:
    problems = problems_of(run(flow_run({"charts": chart_step(timeframe=timeframe)})))
    assert any(p.startswith("steps.charts.timeframe:") for p in problems), problems


@pytest.mark.parametrize("timeframe", ["2m", "8h", "2D", "3D", "3M", "6M", "1Y"])
def test_the_intervals_chart_img_added_are_accepted(timeframe: str) -> None:
    result = run(flow_run({"charts": chart_step(timeframe=timeframe)}))
    assert isinstance(result, ValidatedStep), result
    assert {c.body["interval"] for c in result.calls} == {timeframe}


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        (None, "steps.charts.inputs:"),
        ({"minImages": 0}, "steps.charts.inputs.requests:"),
        ({"minImages": 0, "requests": []}, "steps.charts.inputs.requests:"),
        ({"minImages": 0, "requests": "price_psar_adi_v1"}, "steps.charts.inputs.requests:"),
        ({"minImages": 0, "requests": ["price_psar_adi_v1"]}, "steps.charts.inputs.requests[0]:"),
        (
            {"minImages": 0, "requests": [{"chartTemplateId": "../x"}]},
            "steps.charts.inputs.requests[0].chartTemplateId:",
        ),
        ({"minImages": 0, "requests": [{}]}, "steps.charts.inputs.requests[0].chartTemplateId:"),
        (
            {
                "minImages": 1,
                "requests": [
                    {"chartTemplateId": "price_psar_adi_v1"},
                    {"chartTemplateId": "price_psar_adi_v1"},
                ],
            },
            "steps.charts.inputs.requests[1].chartTemplateId:",
        ),
        ({"requests": [{"chartTemplateId": "price_psar_adi_v1"}]}, "steps.charts.inputs.minImages:"),
        (
            {"minImages": "2", "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
            "steps.charts.inputs.minImages:",
        ),
        (
            {"minImages": True, "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
            "steps.charts.inputs.minImages:",
        ),
        (
            {"minImages": 1.5, "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
            "steps.charts.inputs.minImages:",
        ),
        (
            {"minImages": -1, "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
            "steps.charts.inputs.minImages:",
        ),
        (
            {"minImages": 2, "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
            "steps.charts.inputs.minImages:",
        ),
    ],
)
def test_inputs_rules(inputs: Any, field: str) -> None:
    step = chart_step()
    step["inputs"] = inputs
    problems = problems_of(run(flow_run({"charts": step})))
    assert any(p.startswith(field) for p in problems), problems


def test_min_images_equal_to_request_count_is_allowed() -> None:
    step = chart_step()
    step["inputs"]["minImages"] = 3
    assert isinstance(run(flow_run({"charts": step})), ValidatedStep)


def test_missing_template() -> None:
    step = chart_step()
    step["inputs"]["requests"].append({"chartTemplateId": "no_such_template_v9"})
    problems = problems_of(run(flow_run({"charts": step})))
    assert problems == ["chart_templates/no_such_template_v9: template not found"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"chartImgSymbolTemplate": None}, "chartImgSymbolTemplate"),
        ({"chartImgSymbolTemplate": "BINANCE:BTCUSDT"}, "chartImgSymbolTemplate"),
        ({"chartImgSymbolTemplate": "BINANCE/{symbol}"}, "chartImgSymbolTemplate"),
        ({"request": None}, "request"),
        ({"request": {"symbol": "BINANCE:ETHUSDT"}}, "request.symbol"),
        ({"request": {"interval": "1D"}}, "request.interval"),
        ({"description": ""}, "description"),
        ({"request": {"width": 1920}}, "request.width: 1920 exceeds the BASIC plan's maximum 800"),
        ({"request": {"width": 320}}, "request.width: 320 is below CHART-IMG's minimum 400"),
        ({"request": {"height": 1080}}, "request.height: 1080 exceeds the BASIC plan's maximum 600"),
        ({"request": {"height": 220}}, "request.height: 220 is below CHART-IMG's minimum 300"),
        ({"request": {"scale": {"mode": "log"}}}, "request.scale"),
        ({"request": {"drawings": [{"name": "Horizontal Line"}]}}, "request.drawings[0].input"),
        (
            {"request": {"drawings": [{"name": "Horizontal Line", "input": {"price": 1}, "zOrder": "up"}]}},
            "request.drawings[0].zOrder",
        ),
        (
            {
                "request": {
                    "studies": [{"name": "Volume"}] * 2,
                    "drawings": [{"name": "Text", "input": {}}] * 2,
                }
            },
            "request.drawings: 2 studies + 2 drawings = 4 exceed the BASIC plan's parameter limit 3",
        ),
    ],
)
def test_template_rules(change: dict[str, Any], field: str) -> None:
    templates = {k: dict(v) for k, v in TEMPLATES.items()}
    templates["price_psar_adi_v1"].update(change)
    problems = problems_of(run(flow_run({"charts": chart_step()}), templates=templates))
    assert any(p.startswith(f"chart_templates/price_psar_adi_v1.{field}") for p in problems), problems


def test_each_account_serves_what_its_plan_allows_and_a_template_no_plan_fixes_names_no_plan() -> None:
    templates = {k: dict(v) for k, v in TEMPLATES.items()}
    template = templates["price_psar_adi_v1"]
    template["request"] = {**template["request"], "width": 1920, "height": 1080}
    doc = flow_run({"charts": chart_step()})
    both = (("b", "BASIC"), ("p", "PRO"))
    result = run(doc, templates=templates, accounts=both)
    assert isinstance(result, ValidatedStep)
    plans = {c.chart_template_id: c.serving_plans for c in result.calls}
    assert plans["price_psar_adi_v1"] == {"PRO"} and plans["price_ema_volume_v1"] == {"BASIC", "PRO"}
    unknown = {**template["request"], "studies": [{"name": "No Such Study"}]}  # no plan allows it
    templates["price_psar_adi_v1"] = {**template, "request": unknown}
    problems = problems_of(run(doc, templates=templates, accounts=(("b", "BASIC"),)))
    assert problems and not any("needs the" in p for p in problems)
    assert any("1920 exceeds the BASIC plan's maximum 800" in p for p in problems)


def test_the_plan_decides_the_template_limits() -> None:
    templates = {k: dict(v) for k, v in TEMPLATES.items()}
    template = templates["price_psar_adi_v1"]
    template["request"] = {**template["request"], "width": 1920, "height": 1080}
    doc = flow_run({"charts": chart_step()})

    problems = problems_of(run(doc, templates=templates))
    assert problems == [
        "chart_templates/price_psar_adi_v1: needs the PRO plan (or above), which no configured account "
        "has (CHART_IMG_PLAN BASIC, no account configured)",
        "chart_templates/price_psar_adi_v1.request.width: 1920 exceeds the BASIC plan's maximum 800",
        "chart_templates/price_psar_adi_v1.request.height: 1080 exceeds the BASIC plan's maximum 600",
    ]
    result = run(doc, templates=templates, plan=PLANS["PRO"])
    assert isinstance(result, ValidatedStep)
    assert result.calls[0].body["width"] == 1920


@pytest.mark.parametrize(
    ("run_id", "step_id", "field"),
    [
        ("../../etc", "charts", "runId:"),
        ("run1", "charts/../../x", "stepId:"),
        ("run 1", "charts", "runId:"),
    ],
)
def test_ids_that_become_paths_must_be_safe(run_id: str, step_id: str, field: str) -> None:
    doc = flow_run({step_id: chart_step()}, run_id=run_id)
    problems = problems_of(run(doc, step_id, run_id=run_id))
    assert any(p.startswith(field) for p in problems), problems


def test_document_run_id_must_match_its_path() -> None:
    problems = problems_of(run(flow_run({"charts": chart_step()}, run_id="other"), run_id="run1"))
    assert any(p.startswith("runId: document says 'other'") for p in problems)


def test_every_problem_is_reported_and_message_counts_them() -> None:
    step = chart_step(timeframe="7h")
    step["inputs"]["minImages"] = 9
    result = run(flow_run({"charts": step}, symbol="btc/usdt"))
    problems = problems_of(result)
    assert len(problems) == 3
    assert isinstance(result, StepError) and "(and 2 more)" in result.message


def test_requested_template_ids_tolerates_garbage() -> None:
    assert requested_template_ids(
        {
            "inputs": {
                "requests": [
                    {"chartTemplateId": "b"},
                    {"chartTemplateId": "a"},
                    "x",
                    {"chartTemplateId": "../c"},
                ]
            }
        }
    ) == ["a", "b"]
    assert requested_template_ids({"inputs": None}) == []
    assert requested_template_ids(None) == []  # no such step: nothing to fetch


def test_too_many_requests() -> None:
    step = chart_step()
    step["inputs"]["requests"] = [{"chartTemplateId": f"t{i}"} for i in range(101)]
    step["inputs"]["minImages"] = 0
    problems = problems_of(run(flow_run({"charts": step})))
    assert problems == ["steps.charts.inputs.requests: 101 requests, at most 100 allowed"]


@pytest.mark.parametrize("extra", [float("nan"), float("inf"), b"bytes", object()])
def test_requests_must_be_plain_json(extra: Any) -> None:
    step = chart_step()
    step["inputs"]["requests"][0]["weight"] = extra
    problems = problems_of(run(flow_run({"charts": step})))
    assert any(p.startswith("steps.charts.inputs.requests[0]: must hold plain JSON") for p in problems)


def test_problem_list_is_capped_so_the_error_stays_small() -> None:
    step = chart_step()
    step["inputs"]["requests"] = [{"chartTemplateId": f"missing_{i}"} for i in range(60)]
    result = run(flow_run({"charts": step}, symbol="x" * 10_000))
    assert isinstance(result, StepError)
    assert len(result.details["problems"]) == 20 and result.details["problemCount"] == 61
    assert all(len(p) <= 300 for p in result.details["problems"])
    assert len(result.message) < 400


def test_exactly_the_maximum_of_requests_is_allowed() -> None:
    """At most MAX_REQUESTS (100): a step with exactly 100 is judged request by request."""
    step = chart_step()
    step["inputs"]["requests"] = [{"chartTemplateId": f"t{i}"} for i in range(100)]
    step["inputs"]["minImages"] = 0
    result = run(flow_run({"charts": step}))
    assert isinstance(result, StepError)
    assert not any(p.startswith("steps.charts.inputs.requests:") for p in result.details["problems"])
    assert result.details["problemCount"] == 100  # each template looked up, none found


def test_a_validated_step_carries_its_ids_market_and_the_default_timezone() -> None:
    templates = {k: {**v, "request": {**v["request"]}} for k, v in TEMPLATES.items() if "request" in v}
    for template in templates.values():
        template["request"].pop("timezone", None)
    doc = flow_run({"charts": chart_step(timeframe="4h")}, run_id="run7")
    result = validate_step(
        doc,
        "run7",
        "charts",
        {template_id: StoredTemplate(template_id, d) for template_id, d in templates.items()},
        replace(LIMITS, default_timezone="America/New_York"),
    )
    assert isinstance(result, ValidatedStep)
    assert (result.run_id, result.step_id, result.timeframe) == ("run7", "charts", "4h")
    assert {(c.run_id, c.step_id, c.interval) for c in result.calls} == {("run7", "charts", "4h")}
    assert {c.body["timezone"] for c in result.calls} == {"America/New_York"}


@pytest.mark.parametrize("steps", [None, [], "charts", {}])
def test_a_missing_step_is_the_only_problem_named_beside_the_ids(steps: Any) -> None:
    doc = flow_run({"charts": chart_step()})
    doc["steps"] = steps
    assert problems_of(run(doc)) == ["steps.charts: step not found"]


def test_scope_and_symbol_problems_show_what_was_given() -> None:
    doc = flow_run({"charts": chart_step()})
    doc["scope"] = "BTCUSDT"
    assert "scope: must be an object with a symbol, got str" in problems_of(run(doc))
    problems = problems_of(run(flow_run({"charts": chart_step()}, symbol="btc")))
    assert problems == [
        "scope.symbol: 'btc': lower-case 'b' at 1: TradingView symbols are upper case "
        "(e.g. BTCUSDT, ES1!, BTCUSDT.P)"
    ]


def test_the_error_message_is_the_one_problem_or_the_first_and_how_many_more() -> None:
    one = run(flow_run({"charts": chart_step(timeframe="7h")}))
    assert isinstance(one, StepError)
    assert one.message == "invalid step inputs: " + one.details["problems"][0]
    assert "more)" not in one.message
    step = chart_step(timeframe="7h")
    step["inputs"]["minImages"] = 9
    two = run(flow_run({"charts": step}))
    assert isinstance(two, StepError) and len(two.details["problems"]) == 2
    assert two.message == f"invalid step inputs: {two.details['problems'][0]} (and 1 more)"


def test_twenty_problems_are_all_kept_without_a_count() -> None:
    step = chart_step()
    step["inputs"]["requests"] = [{"chartTemplateId": f"missing_{i}"} for i in range(20)]
    step["inputs"]["minImages"] = 0
    result = run(flow_run({"charts": step}))
    assert isinstance(result, StepError)
    assert len(result.details["problems"]) == 20 and "problemCount" not in result.details


def unsafe_id_problem(length: int) -> list[str]:
    """The one problem of a request whose chartTemplateId is `length` characters of '!'."""
    step = chart_step()
    step["inputs"] = {"minImages": 0, "requests": [{"chartTemplateId": "!" * length}]}
    return problems_of(run(flow_run({"charts": step})))


def test_a_problem_is_kept_whole_up_to_300_characters_then_cut_with_an_ellipsis() -> None:
    base = len(unsafe_id_problem(1)[0]) - 1  # the problem's length without the id
    (whole,) = unsafe_id_problem(300 - base)
    assert len(whole) == 300 and not whole.endswith("…")
    (cut,) = unsafe_id_problem(301 - base)
    untruncated = whole.replace("!'", "!!'", 1)  # one character longer
    assert len(cut) == 300 and cut == untruncated[:299] + "…"


# --- layout templates (issue 40) ---------------------------------------------------------------

LAYOUT = "my_tradingview_layout_v1"


def layout_step(*template_ids: str) -> dict[str, Any]:
    requests = [{"chartTemplateId": t} for t in template_ids]
    return flow_run({"charts": chart_step(inputs={"minImages": 1, "requests": requests})})


def test_a_layout_template_becomes_a_layout_call_with_the_market_and_no_timezone() -> None:
    private = {
        **TEMPLATES[LAYOUT],
        "layout": {**TEMPLATES[LAYOUT]["layout"], "private": True, "session": "tv"},
    }
    result = run(layout_step("price_psar_adi_v1", LAYOUT), templates={**TEMPLATES, LAYOUT: private})
    assert isinstance(result, ValidatedStep)
    advanced, layout = result.calls
    assert (advanced.layout, advanced.endpoint.value) == (None, "advanced-chart")
    assert layout.endpoint.value == "layout-chart"
    assert (layout.layout.layout_id, layout.layout.private, layout.layout.session) == ("37wLAGgd", True, "tv")
    # the layout's body: its own fields and the market, nothing of the Advanced Chart's
    assert layout.body == {
        "width": 800,
        "height": 600,
        "resetZoom": True,
        "symbol": "BINANCE:BTCUSDT",
        "interval": "1h",
    }
    assert layout.fixture_key == "BINANCE_BTCUSDT__1h__my_tradingview_layout_v1"


def under_budget(
    doc: dict[str, Any], request_timeout: float, finalize: float, layout_timeout: float | None
) -> ValidatedStep | StepError:
    """The step validated as a worker with these settings (layout_timeout None: mock mode)."""
    limits = replace(StepLimits.within_request(request_timeout, finalize), layout_call_seconds=layout_timeout)
    return validate_step(
        doc, "run1", "charts", {t: StoredTemplate(t, d) for t, d in TEMPLATES.items()}, limits
    )


def test_a_step_whose_charts_cannot_hold_one_layout_call_is_refused_with_the_numbers() -> None:
    # REQUEST_TIMEOUT_SECONDS 60, FINALIZE_BUDGET_SECONDS 10: a 50 s step, 10 s kept for the
    # manifest (a fifth), 40 s of charts; a layout call 60 s and an attempt's second more
    result = under_budget(layout_step("price_psar_adi_v1", LAYOUT), 60, 10, 60)
    assert problems_of(result) == [
        "chart_templates/my_tradingview_layout_v1.layout: a layout call needs 61 s "
        "(CHART_IMG_LAYOUT_TIMEOUT_SECONDS 60 and an attempt's 1 s), this step's charts have 40 s "
        "(its 50 s budget less 10 s kept for the manifest): raise REQUEST_TIMEOUT_SECONDS or lower "
        "CHART_IMG_LAYOUT_TIMEOUT_SECONDS"
    ]


@pytest.mark.parametrize(
    ("request_timeout", "finalize", "layout_timeout"),
    [
        (300, 30, 60),  # the defaults: 250 s of charts
        (60, 10, 39),  # 40 s of charts hold 39 s and the attempt's second, exactly
        (20, 5, None),  # mock mode: no call, no time needed
    ],
)
def test_a_step_with_time_for_a_layout_call_or_no_call_at_all_passes(
    request_timeout: float, finalize: float, layout_timeout: float | None
) -> None:
    result = under_budget(layout_step(LAYOUT), request_timeout, finalize, layout_timeout)
    assert isinstance(result, ValidatedStep), result


def test_an_advanced_chart_step_is_not_held_to_the_layout_call() -> None:
    assert isinstance(under_budget(layout_step("price_psar_adi_v1"), 20, 5, 60), ValidatedStep)
