"""Templates checked as CHART-IMG checks them (issue 10 item 4): each rule names its field, the
plan sets the maxima, and the CHART_IMG_PLAN setting reaches step validation end to end."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.builders import TEMPLATES_DIR, chart_step, flow_run, load_templates
from worker_chart_export.bootstrap import step_limits
from worker_chart_export.bundled.contracts import CHART_TEMPLATE, schema_errors
from worker_chart_export.cli.main import main
from worker_chart_export.core.chart_img.plans import PLANS, AccountPlans, plan_named
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.templates.symbols import symbol_problem
from worker_chart_export.core.templates.template_check import template_problems
from worker_chart_export.core.templates.template_rules import (
    CHART_IMG_INTERVALS,
    interval_problem,
    rule_problems,
    shown,
)
from worker_chart_export.settings import load_settings

BASIC, PRO = PLANS["BASIC"], PLANS["PRO"]


def base_template() -> dict[str, Any]:
    return copy.deepcopy(load_templates()["price_psar_adi_v1"])


def with_request(**changes: Any) -> dict[str, Any]:
    template = base_template()
    template["request"].update(changes)
    return template


def problems_at(template: dict[str, Any], plan: Any = BASIC) -> dict[str, str]:
    return {p.suffix: p.message for p in template_problems(template, plan)}


def studies(*names: str) -> list[dict[str, Any]]:
    return [{"name": name} for name in names]


def drawing(**fields: Any) -> dict[str, Any]:
    return {"name": "Horizontal Line", "input": {"price": 100}, **fields}


# Each rule: the change, the field it must name, a piece of the message.
REFUSED = [
    ({"width": 399}, ".request.width", "below CHART-IMG's minimum 400"),
    ({"height": 299}, ".request.height", "below CHART-IMG's minimum 300"),
    ({"width": 801}, ".request.width", "801 exceeds the BASIC plan's maximum 800"),
    ({"height": 601}, ".request.height", "601 exceeds the BASIC plan's maximum 600"),
    ({"width": "800"}, ".request.width", "must be an integer"),
    ({"height": True}, ".request.height", "must be an integer"),
    ({"scale": {"mode": "log"}}, ".request.scale", "must be one of the strings regular, percent"),
    ({"scale": "log"}, ".request.scale", "'log' must be one of"),
    (
        {"drawings": [{"name": "Horizontal Line"}]},
        ".request.drawings[0].input",
        "missing: CHART-IMG requires",
    ),
    ({"drawings": [drawing(input=[1])]}, ".request.drawings[0].input", "[1]: CHART-IMG requires"),
    (
        {"drawings": [drawing(zOrder="front")]},
        ".request.drawings[0].zOrder",
        "'front' must be one of top, bottom",
    ),
    ({"drawings": [{"input": {}}]}, ".request.drawings[0].name", "must be a non-empty string"),
    ({"drawings": "Horizontal Line"}, ".request.drawings", "must be a list of objects"),
    ({"studies": [{"name": "RSI"}, 7]}, ".request.studies[1]", "must be an object"),
    (
        {"studies": studies("Volume", "MACD"), "drawings": [drawing(), drawing()]},
        ".request.drawings",
        "2 studies + 2 drawings = 4 exceed the BASIC plan's parameter limit 3",
    ),
    (
        {"studies": studies("Volume", "MACD", "Momentum", "VWAP")},
        ".request.studies",
        "4 studies + 0 drawings = 4 exceed the BASIC plan's parameter limit 3",
    ),
    ({"symbol": "BINANCE:ETHUSDT"}, ".request.symbol", "the worker sets it"),
]


@pytest.mark.parametrize(("change", "field", "message"), REFUSED)
def test_each_rule_names_its_field(change: dict[str, Any], field: str, message: str) -> None:
    found = problems_at(with_request(**change))
    assert field in found, found
    assert message in found[field]


@pytest.mark.parametrize(
    "change",
    [
        {"width": 400, "height": 300},
        {"width": 800, "height": 600},
        *({"scale": scale} for scale in ("regular", "percent", "indexedTo100", "logarithmic")),
        {"studies": [{"name": "Volume"}], "drawings": [drawing(zOrder="top"), drawing(zOrder="bottom")]},
        {"studies": []},
    ],
)
def test_what_chart_img_accepts_passes(change: dict[str, Any]) -> None:
    template = with_request(**change)
    assert template_problems(template, BASIC) == []
    assert schema_errors(CHART_TEMPLATE, template) == []  # the schema agrees


def test_the_plan_sets_the_maxima() -> None:
    big = with_request(width=1920, height=1080)
    assert problems_at(big, BASIC) == {
        ".request.width": "1920 exceeds the BASIC plan's maximum 800",
        ".request.height": "1080 exceeds the BASIC plan's maximum 600",
    }
    assert problems_at(big, PRO) == {}
    assert ".request.height" in problems_at(with_request(height=1081), PRO)

    five = with_request(studies=studies("Volume", "MACD", "VWAP"), drawings=[drawing(), drawing()])
    assert ".request.drawings" in problems_at(five, BASIC)
    assert problems_at(five, PRO) == {}
    assert (
        "PRO plan's parameter limit 5"
        in problems_at(with_request(studies=studies(*["Volume"] * 6)), PRO)[".request.studies"]
    )


def test_every_bundled_template_passes_on_every_plan() -> None:
    templates = load_templates()
    assert len(templates) >= 4
    for plan in PLANS.values():
        for template_id, template in templates.items():
            assert template_problems(template, plan) == [], (plan.name, template_id)


def test_the_documented_intervals() -> None:
    documented = "1m 2m 3m 5m 15m 30m 45m 1h 2h 3h 4h 6h 8h 12h 1D 2D 3D 1W 1M 3M 6M 1Y"
    assert " ".join(CHART_IMG_INTERVALS) == documented
    assert all(interval_problem(i) is None for i in CHART_IMG_INTERVALS)
    for bad in ("1H", "10m", "1d", "", None, 60, ["1h"]):
        problem = interval_problem(bad)
        assert problem is not None and problem.startswith(f"{bad!r} is not a CHART-IMG interval")


def test_the_contracts_list_the_same_intervals() -> None:
    from worker_chart_export.bundled.contracts import CONTRACTS_DIR

    for name in ("flow_run.schema.json", "charts_outputs_manifest.schema.json"):
        schema = json.loads((CONTRACTS_DIR / name).read_text())
        assert tuple(schema["$defs"]["chartImgInterval"]["enum"]) == CHART_IMG_INTERVALS, name


# --- the CHART_IMG_PLAN setting ----------------------------------------------------------------


def test_chart_img_plan_setting_defaults_to_basic_and_reaches_the_step_limits(
    settings_environment: Callable[..., None],
) -> None:
    settings_environment()
    assert load_settings().chart_img_plan == "BASIC"
    assert step_limits(load_settings()).plans == AccountPlans(BASIC)
    settings_environment(CHART_IMG_PLAN=" pro ")
    settings = load_settings()
    assert settings.chart_img_plan == "PRO" and step_limits(settings).plans == AccountPlans(plan_named("PRO"))


def test_unknown_chart_img_plan_is_a_config_error_naming_the_variable(
    settings_environment: Callable[..., None],
) -> None:
    settings_environment(CHART_IMG_PLAN="GOLD")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == "CHART_IMG_PLAN"
    assert "unknown CHART-IMG plan 'GOLD'" in caught.value.problem and "ENTERPRISE" in caught.value.problem


@pytest.mark.parametrize(("plan", "verdict"), [(None, "FAILED"), ("BASIC", "FAILED"), ("PRO", "SUCCEEDED")])
def test_run_local_checks_templates_against_the_configured_plan(
    plan: str | None,
    verdict: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 1920x1080 template: refused under BASIC (before any call), rendered under PRO."""
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR, templates)
    big = json.loads((templates / "price_psar_adi_v1.json").read_text())
    big["request"].update(width=1920, height=1080)
    (templates / "price_psar_adi_v1.json").write_text(json.dumps(big))
    for var in ("CHARTS_API_MODE", "CHARTS_BUCKET", "CHART_IMG_ACCOUNTS_JSON", "CHARTS_LOCAL_OUTPUT_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CHART_TEMPLATES_DIR", str(templates))
    if plan is None:
        monkeypatch.delenv("CHART_IMG_PLAN", raising=False)
    else:
        monkeypatch.setenv("CHART_IMG_PLAN", plan)
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(flow_run({"charts": chart_step()})))

    code = main(["run-local", "--flow-run-path", str(path), "--output-dir", str(tmp_path / "out")])
    out = capsys.readouterr().out

    assert out.startswith(f"CHART_EXPORT {verdict}"), out
    if verdict == "FAILED":
        assert code == 1 and "VALIDATION_FAILED" in out
        assert "chart_templates/price_psar_adi_v1: needs the PRO plan (or above)" in out
    else:
        assert code == 0


# --- each rule's exact problem: the field it names and what it says ------------------------------


def rules_at(template: dict[str, Any], plan: Any = BASIC) -> list[tuple[tuple[str | int, ...], str]]:
    return [(p.path, p.message) for p in rule_problems(template, plan)]


def test_the_top_level_fields_each_name_their_own_problem() -> None:
    assert rules_at({"chartImgSymbolTemplate": 5, "description": "  ", "request": "x"}) == [
        (("chartImgSymbolTemplate",), "must be a string containing {symbol}"),
        (("description",), "must be a non-empty string (it is the manifest kind)"),
        (("request",), "must be an object"),
    ]


def test_a_symbol_template_is_read_with_one_letter_for_the_symbol() -> None:
    template = {**base_template(), "chartImgSymbolTemplate": "{symbol}!!"}
    problem = symbol_problem("X!!", require_exchange=False)
    assert problem is not None and "at 3" in problem  # the second '!', right after "X!"
    assert rules_at(template) == [
        (
            ("chartImgSymbolTemplate",),
            f"'{{symbol}}!!' does not make a TradingView symbol (read with {{symbol}} as X): {problem}",
        )
    ]


def test_every_problem_of_a_template_is_listed_not_only_the_last() -> None:
    template = {
        **base_template(),
        "description": "",
        "request": {
            "symbol": "BINANCE:ETHUSDT",
            "width": "800",
            "studies": [{"name": ""}, 7],
            "drawings": [{"name": "Text"}, {"input": {}}],
        },
    }
    assert rules_at(template) == [
        (("description",), "must be a non-empty string (it is the manifest kind)"),
        (("request", "symbol"), "must not be set by a template (the worker sets it)"),
        (("request", "width"), "'800' must be an integer number of pixels"),
        (("request", "studies", 1), "must be an object"),
        (("request", "studies", 0, "name"), "must be a non-empty string (CHART-IMG requires it)"),
        (("request", "drawings", 0, "input"), "missing: CHART-IMG requires a drawing's input object"),
        (("request", "drawings", 1, "name"), "must be a non-empty string (CHART-IMG requires it)"),
    ]
    assert rules_at({**base_template(), "request": {"studies": {"name": "RSI"}}}) == [
        (("request", "studies"), "must be a list of objects")
    ]


def test_an_unknown_interval_lists_the_documented_ones() -> None:
    assert interval_problem("1H") == f"'1H' is not a CHART-IMG interval ({' '.join(CHART_IMG_INTERVALS)})"


def test_a_value_is_shown_whole_up_to_60_characters_then_cut() -> None:
    assert shown("a" * 58) == repr("a" * 58)  # 60 characters with its quotes
    assert shown("a" * 59) == repr("a" * 59)[:59] + "…"
    assert len(shown("a" * 59)) == 60 and len(shown("a" * 500)) == 60
