"""The one rule set (core/templates/template_check.py): the schema, CHART-IMG's rules and its documented
lists, one message per field; every documented study and drawing passes; `templates sync` and
step validation say the same; a stored version is checked once."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.builders import load_templates
from worker_chart_export.adapters.local import LocalTemplateSource
from worker_chart_export.bundled import chart_img_docs as docs
from worker_chart_export.bundled.contracts import CHART_TEMPLATE, schema_errors
from worker_chart_export.core.chart_img.plans import PLANS, AccountPlans, Plan
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.templates.template_check import StoredTemplate, template_problems
from worker_chart_export.core.templates.template_rules import TemplateProblem
from worker_chart_export.settings import load_settings
from worker_chart_export.tools.templates_sync import load_templates as sync_load

BASIC, PRO, ULTRA = PLANS["BASIC"], PLANS["PRO"], PLANS["ULTRA"]


def thawed(value: Any) -> Any:
    """The docs' frozen values as the JSON a template holds."""
    if isinstance(value, Mapping):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thawed(item) for item in value]
    return value


def with_request(**changes: Any) -> dict[str, Any]:
    template = copy.deepcopy(load_templates()["price_psar_adi_v1"])
    template["request"].update(changes)
    return template


def found(template: Any, plan: Plan = BASIC) -> list[tuple[str, str]]:
    return [(p.suffix, p.message) for p in template_problems(template, plan)]


# --- what the docs list passes ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(docs.studies()))
def test_every_documented_study_passes_as_its_section_shows_it(name: str) -> None:
    example = thawed(docs.studies()[name].example)
    assert found(with_request(studies=[example])) == []
    assert found(with_request(studies=[{"name": name}])) == []


@pytest.mark.parametrize("name", list(docs.drawings()))
def test_every_documented_drawing_passes_as_its_section_shows_it(name: str) -> None:
    example = thawed(docs.drawings()[name].example)
    assert found(with_request(studies=[], drawings=[example])) == []


def test_every_documented_timezone_range_and_override_passes() -> None:
    bounds = docs.request_bounds()
    for zone in sorted(docs.timezones()):
        assert found(with_request(timezone=zone)) == [], zone
    for preset in bounds.range_presets:
        assert found(with_request(range=preset)) == [], preset
    good = with_request(
        range={"from": "2023-01-01T00:00:00.000Z", "to": "2023-02-01T00:00:00.000Z"},
        shiftLeft=1,
        shiftRight=1000,
        session="extended",
        style="line",
        override={
            "mainPaneHeight": 100,
            "scalesFontSize": 50,
            "showLegend": False,
            "priceRange": {"from": 75.12, "to": 99.99, "margin": 0.1},
            "style": {"lineStyle.linewidth": 10, "lineStyle.priceSource": "hlc3"},
        },
    )
    assert found(good) == []
    assert found(with_request(override={"mainPaneHeight": 1800.0})) == []  # a double that is an integer


# --- what CHART-IMG checks, checked (issue 26) --------------------------------------------------

COLOURS_ACCEPTED = [
    "rgb(41,98,255)",
    "rgb( 41, 98 ,255 )",
    "rgba(33,150,243,0.1)",
    "rgba(0,0,0,1)",
    "rgba(0,0,0,.5)",
    "#FFF",
    "#1e90ff",
    "#1E90FF80",
]
COLOURS_REFUSED = [
    "blue-ish",
    "red",
    "rgb(256,0,0)",
    "rgba(0,0,0,1.5)",
    "rgb(1,2)",
    "#FFFF",
    "#12345",
    "",
    "RGB(1,2,3)",
]


@pytest.mark.parametrize("colour", COLOURS_ACCEPTED)
def test_a_colour_the_docs_and_css_write_passes(colour: str) -> None:
    study = {"name": "Moving Average Exponential", "override": {"Plot.color": colour}}
    assert found(with_request(studies=[study])) == []


@pytest.mark.parametrize("colour", COLOURS_REFUSED)
def test_any_other_colour_is_refused_naming_the_field(colour: str) -> None:
    study = {"name": "Moving Average Exponential", "override": {"Plot.color": colour}}
    assert found(with_request(studies=[study])) == [
        (
            ".request.studies[0].override['Plot.color']",
            f"{colour!r} must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA "
            "(e.g. rgb(41,98,255))",
        )
    ]


def test_an_integral_number_passes_wherever_an_integer_is_documented() -> None:
    """The Firestore console stores numbers as doubles: 800.0 is 800 to CHART-IMG (JSON numbers)."""
    template = with_request(width=800.0, height=600.0, shiftLeft=10.0, watermarkSize=32.0)
    assert found(template) == []
    assert found(with_request(width=800.5)) == [
        (".request.width", "800.5 must be an integer number of pixels")
    ]
    assert found(with_request(width=float("inf"))) != []


def test_watermark_size_is_any_plans_the_docs_name_none_for_it() -> None:
    for plan in PLANS.values():
        assert found(with_request(watermarkSize=64), plan) == [], plan.name


def test_the_docs_default_column_gets_a_hint_naming_columns() -> None:
    study = {"name": "Volume", "override": {"Volume.plottype": "column"}}
    [(where, message)] = found(with_request(studies=[study]))
    assert where == ".request.studies[0].override['Volume.plottype']"
    assert message.endswith(
        "(write 'columns': the docs' default 'column' is spelt 'columns' in their own list)"
    )
    study["override"]["Volume.plottype"] = "circle"  # not the default: a plain suggestion
    assert found(with_request(studies=[study]))[0][1].endswith("(did you mean 'circles'?)")
    study["override"]["Volume.plottype"] = "columns"
    assert found(with_request(studies=[study])) == []
    study["override"]["Volume.plottype"] = "cols"  # 0.73 like 'columns': too far for a hint
    assert found(with_request(studies=[study]))[0][1].endswith("step_line_with_breaks")


def test_watermarks_pass_on_the_plans_that_may_send_them() -> None:
    marked = with_request(watermark="ACME", watermarkSize=64, watermarkOpacity=0.5)
    for plan in (ULTRA, PLANS["ENTERPRISE"]):
        assert found(marked, plan) == [], plan.name
    assert found(with_request(watermarkSize=48), ULTRA) == [
        (".request.watermarkSize", "48 must be one of 16, 32, 64, 128")
    ]


# --- what they do not list is refused, naming the field ----------------------------------------

REFUSED = [
    ({"format": "jpeg"}, ".request.format", "'jpeg' must be 'png': the worker stores PNGs only"),
    ({"theme": "blue"}, ".request.theme", "'blue' must be one of light, dark"),
    ({"style": "renko"}, ".request.style", "'renko' must be one of bar, candle, line"),
    ({"session": "night"}, ".request.session", "'night' must be one of regular, extended"),
    (
        {"thme": "dark"},
        ".request.thme",
        "is not an Advanced Chart parameter CHART-IMG documents (did you mean 'theme'?)",
    ),
    (
        {"studies": [{"name": "Parabolic SAR", "inputs": {"in_0": 0.02}}]},
        ".request.studies[0].inputs",
        "is not a key of a study entry CHART-IMG documents (did you mean 'input'?)",
    ),
    ({"studies": [{"name": "RSI"}]}, ".request.studies[0].name", "'RSI' is not a study CHART-IMG documents"),
    (
        {"studies": [{"name": "Relative Strength Indx"}]},
        ".request.studies[0].name",
        "(did you mean 'Relative Strength Index'?)",
    ),
    (
        {"studies": [{"name": "Relative Strength Index", "input": {"lenght": 14}}]},
        ".request.studies[0].input.lenght",
        "is not an input key of 'Relative Strength Index' CHART-IMG documents (did you mean 'length'?)",
    ),
    (
        {"studies": [{"name": "Relative Strength Index", "input": {"length": 0}}]},
        ".request.studies[0].input.length",
        "0 is below the documented minimum 1",
    ),
    (
        {"studies": [{"name": "MACD", "input": {"in_3": "median"}}]},
        ".request.studies[0].input.in_3",
        "'median' must be one of open, high, low, close, hl2, hlc3, ohlc4",
    ),
    (
        {"studies": [{"name": "Volume", "override": {"Volume.colour.0": "red"}}]},
        ".request.studies[0].override['Volume.colour.0']",
        "is not an override key of 'Volume' CHART-IMG documents",
    ),
    (
        {"studies": [{"name": "Volume", "forceOverlay": "yes"}]},
        ".request.studies[0].forceOverlay",
        "'yes' must be true or false",
    ),
    (
        {"drawings": [{"name": "Circle", "input": {}}]},
        ".request.drawings[0].name",
        "'Circle' is not a drawing",
    ),
    (
        {"drawings": [{"name": "Horizontal Line", "input": {"text": "x"}}]},
        ".request.drawings[0].input.price",
        "is required by a 'Horizontal Line' drawing",
    ),
    (
        {"drawings": [{"name": "Vertical Line", "input": {"datetime": "yesterday"}}]},
        ".request.drawings[0].input.datetime",
        "'yesterday' must be an ISO 8601 date-time string",
    ),
    (
        {"drawings": [{"name": "Horizontal Line", "input": {"price": 1}, "override": {"lineStyle": 6}}]},
        ".request.drawings[0].override.lineStyle",
        "6 is above the documented maximum 5",
    ),
    (
        {"timezone": "Mars/Olympus"},
        ".request.timezone",
        "'Mars/Olympus' is not in CHART-IMG's Supported Timezone table",
    ),
    ({"range": "2Y"}, ".request.range", "'2Y' is not a documented range preset (1D, 5D, 1M"),
    ({"range": 30}, ".request.range", "30 must be a preset (1D, 5D"),
    ({"range": {"from": "2024-01-01T00:00:00Z"}}, ".request.range.to", "is required in a range object"),
    (
        {"range": {"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}},
        ".request.range.to",
        "'2024-01-01T00:00:00Z' must be after from",
    ),
    ({"shiftLeft": 0}, ".request.shiftLeft", "0 is below the documented minimum 1"),
    ({"shiftRight": 1001}, ".request.shiftRight", "1001 is above the documented maximum 1000"),
    ({"shiftLeft": 2.5}, ".request.shiftLeft", "2.5 must be an integer"),
    (
        {"override": {"mainPaneHeight": 99}},
        ".request.override.mainPaneHeight",
        "99 is below the documented minimum 100",
    ),
    (
        {"override": {"mainPaneHeight": 1801}},
        ".request.override.mainPaneHeight",
        "1801 is above the documented maximum 1800",
    ),
    (
        {"override": {"scalesFontSize": 9}},
        ".request.override.scalesFontSize",
        "9 is below the documented minimum 10",
    ),
    (
        {"override": {"priceRange": {"margin": 0.5}}},
        ".request.override.priceRange.margin",
        "0.5 is above the documented maximum 0.1",
    ),
    (
        {"override": {"style": {"lineStyle.color": "red"}}},
        ".request.override.style['lineStyle.color']",
        "is not an override.style key of style 'candle' CHART-IMG documents",
    ),
    ({"override": {"showLegends": False}}, ".request.override.showLegends", "(did you mean 'showLegend'?)"),
    ({"override": {"showLegend": "no"}}, ".request.override.showLegend", "'no' must be true or false"),
    (
        {"watermark": "ACME"},
        ".request.watermark",
        "custom watermarks are for the ENTERPRISE and ULTRA plans, not BASIC",
    ),
    (
        {"watermarkOpacity": 0.5},
        ".request.watermarkOpacity",
        "custom watermarks are for the ENTERPRISE and ULTRA",
    ),
]


@pytest.mark.parametrize(("change", "path", "message"), REFUSED)
def test_each_undocumented_value_is_refused_once_naming_its_field(
    change: dict[str, Any], path: str, message: str
) -> None:
    problems = found(with_request(**change))
    assert [where for where, _ in problems] == [path], problems  # one message per field
    assert message in problems[0][1]


def test_watermarks_are_refused_on_pro_too() -> None:
    assert found(with_request(watermark="ACME"), PRO) == [
        (".request.watermark", "custom watermarks are for the ENTERPRISE and ULTRA plans, not PRO")
    ]


def test_what_only_the_schema_says_is_kept_and_named_by_its_field() -> None:
    template = with_request()
    template["colour"] = "red"
    del template["id"]
    template["tags"] = ["a", "a"]
    assert sorted(found(template)) == [
        (
            ".colour",
            "is not allowed here (allowed: id, description, chartImgSymbolTemplate, request, layout, "
            "version, tags)",
        ),
        (".id", "is required"),
        (".tags", "has non-unique elements"),
    ]
    assert found([1]) == [("", "is an array, not of type 'object'")]


def test_values_json_cannot_carry_are_refused() -> None:
    template = with_request(studies=[{"name": "Volume", "override": {"Volume.transparency": float("nan")}}])
    problems = dict(found(template))
    assert problems[""] == "holds a value JSON cannot carry (NaN, Infinity, bytes, ...)"


def test_an_untrusted_key_is_quoted_and_cut_short_in_the_path() -> None:
    evil = "\x1b[31m" + "k" * 100
    [(path, _)] = found(with_request(override={evil: 1}))
    assert path.startswith(".request.override['\\x1b[31mkkk") and path.endswith("…]") and "\x1b" not in path


# --- one rule set: templates sync says what step validation says ---------------------------------


def test_templates_sync_and_step_validation_use_the_same_rule_set(tmp_path: Path) -> None:
    bad = [
        {**with_request(format="jpeg", timezone="Mars/Olympus"), "id": "a_v1"},
        {**with_request(studies=[{"name": "MACD", "inputs": {}}]), "id": "b_v1"},
        {**with_request(watermark="x", override={"mainPaneHeight": 1801}), "id": "c_v1"},
    ]
    for template in bad:
        (tmp_path / f"{template['id']}.json").write_text(json.dumps(template))
    sync_problems = sync_load(tmp_path, AccountPlans(BASIC)).problems
    stored = LocalTemplateSource(tmp_path).get_templates([t["id"] for t in bad])
    step_problems = sorted(
        (f"{i}.json", f"${p.suffix}", p.message) for i, s in stored.items() for p in s.problems(BASIC)
    )
    assert sorted((p.file, p.path, p.message) for p in sync_problems) == step_problems
    assert len(step_problems) == 5


# --- a stored version is checked once ----------------------------------------------------------


class CountingCheck:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, document: Any, plan: Plan) -> list[TemplateProblem]:
        self.calls.append((document["id"], plan.name))
        return template_problems(document, plan)


def test_a_stored_template_is_checked_once_per_plan_and_hands_out_copies() -> None:
    check = CountingCheck()
    stored = StoredTemplate("price_psar_adi_v1", with_request(width=1920), "v1", check=check)
    assert [p.suffix for p in stored.problems(BASIC)] == [".request.width"]
    assert stored.problems(BASIC) == stored.problems(BASIC) and stored.problems(PRO) == ()
    assert check.calls == [("price_psar_adi_v1", "BASIC"), ("price_psar_adi_v1", "PRO")]
    stored.document["request"]["width"] = 800
    assert stored.document["request"]["width"] == 1920


def test_a_stored_id_must_be_the_one_it_is_stored_as() -> None:
    stored = StoredTemplate("other_v1", with_request())
    assert [(p.suffix, p.message) for p in stored.problems(BASIC)] == [
        (".id", "'price_psar_adi_v1' differs from the id it is stored as, 'other_v1'")
    ]


def test_the_local_source_checks_a_file_again_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "price_psar_adi_v1.json"
    path.write_text(json.dumps(with_request()))
    check = CountingCheck()
    source = LocalTemplateSource(tmp_path, check=check)

    first = source.get_templates(["price_psar_adi_v1", "missing_v1", "../x"])["price_psar_adi_v1"]
    for _ in range(3):
        again = source.get_templates(["price_psar_adi_v1"])["price_psar_adi_v1"]
        assert again is first and again.problems(BASIC) == ()
    assert check.calls == [("price_psar_adi_v1", "BASIC")]

    path.write_text(json.dumps(with_request(theme="blue")))
    stamp = path.stat()
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))  # a coarse clock cannot hide it
    edited = source.get_templates(["price_psar_adi_v1"])["price_psar_adi_v1"]
    assert edited is not first
    assert [p.suffix for p in edited.problems(BASIC)] == [".request.theme"]
    assert check.calls == [("price_psar_adi_v1", "BASIC")] * 2


def test_the_bundled_templates_pass_the_schema_too() -> None:
    for template_id, template in load_templates().items():
        assert schema_errors(CHART_TEMPLATE, template) == [], template_id
        for plan in PLANS.values():
            assert found(template, plan) == [], (template_id, plan.name)


def test_the_default_timezone_setting_is_held_to_the_table(
    settings_environment: Callable[..., None],
) -> None:
    """CHARTS_DEFAULT_TIMEZONE goes into every template without a timezone."""
    settings_environment(CHARTS_DEFAULT_TIMEZONE="America/New_York")
    assert load_settings().charts_default_timezone == "America/New_York"
    settings_environment(CHARTS_DEFAULT_TIMEZONE="Mars/Olympus")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == "CHARTS_DEFAULT_TIMEZONE"
    assert "'Mars/Olympus' is not in CHART-IMG's Supported Timezone table" in caught.value.problem


def paths_and_words(template: Any) -> list[tuple[tuple[str | int, ...], str]]:
    return [(p.path, p.message) for p in template_problems(template, BASIC)]


def test_a_market_field_set_by_a_template_is_named_once_by_the_rules_beside_the_schemas_problems() -> None:
    template = with_request(symbol="BINANCE:ETHUSDT")
    del template["id"]
    template["version"] = "x"
    assert paths_and_words(template) == [
        (("request", "symbol"), "must not be set by a template (the worker sets it)"),
        (("id",), "is required"),
        (("version",), "is a string, not of type 'integer'"),
    ]


def test_every_schema_problem_is_kept_beside_those_the_rules_name() -> None:
    template = with_request(drawings=[{"input": {}}])
    template["id"] = 5
    found_paths = [path for path, _ in paths_and_words(template)]
    assert ("id",) in found_paths and ("request", "drawings", 0, "name") in found_paths
    extra = with_request()
    extra["extra"], extra["description"] = 1, ""
    problems = dict(paths_and_words(extra))
    assert problems[("description",)] == "must be a non-empty string (it is the manifest kind)"
    assert problems[("extra",)].startswith("is not allowed here (allowed: id, ")


def test_an_object_where_a_string_belongs_is_named_by_its_type_not_by_its_keys() -> None:
    template = with_request()
    template["tags"] = {"trend": "yes"}
    assert found(template) == [(".tags", "is an object, not of type 'array'")]


def test_an_id_with_two_dots_is_refused_by_the_schema_whatever_the_rules_name() -> None:
    """safeId's own "not" (never `..`): kept beside a problem the rules name under request."""
    dots = "should not be valid under {'pattern': '\\\\.\\\\.'}"
    template = with_request()
    template["id"] = "price..v1"
    assert paths_and_words(template) == [(("id",), dots)]
    template["request"]["symbol"] = "BINANCE:ETHUSDT"
    assert paths_and_words(template) == [
        (("request", "symbol"), "must not be set by a template (the worker sets it)"),
        (("id",), dots),
    ]
