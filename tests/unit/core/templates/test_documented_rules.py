"""core/templates/documented_rules.py: a template's `request` held to what CHART-IMG's documentation
lists (contracts/chart-img/): types, bounds, the range, overrides, studies and drawings;
each problem named by its field, every problem listed."""

from __future__ import annotations

from typing import Any

import pytest

from worker_chart_export.bundled.chart_img_docs import Parameter
from worker_chart_export.core.chart_img.plans import PLANS
from worker_chart_export.core.templates.documented_rules import (
    _value_problems,
    documented_problems,
    value_problem,
)

BASIC = PLANS["BASIC"]
EXAMPLES = "(e.g. Etc/UTC, America/New_York, Europe/London)"


def problems(request: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    return [(p.path, p.message) for p in documented_problems(request, BASIC)]


@pytest.mark.parametrize(
    ("documented", "good", "bad", "said"),
    [
        ("Integer", 20.0, 2.5, "2.5 must be an integer"),
        ("Float", 1.5, "1.5", "'1.5' must be a number"),
        ("Boolean", False, 0, "0 must be true or false"),
        ("String", "", 5, "5 must be a string"),  # an empty string is a string
        ("Color", "rgb(1,2,3)", "  ", "'  ' must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB,"),
        ("Color", "#1E90FF", 5, "5 must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA"),
        ("Color", "rgba(33,150,243,0.1)", "blue-ish", "'blue-ish' must be a colour: rgb(r,g,b)"),
        ("Object", {}, [], "[] must be an object"),
        ("DateTime (ISO8601)", "2023-01-01T00:00:00", "yesterday", "'yesterday' must be an ISO 8601"),
    ],
)
def test_each_documented_type(documented: str, good: Any, bad: Any, said: str) -> None:
    spec = Parameter("p", documented)
    assert value_problem(good, spec) is None
    problem = value_problem(bad, spec)
    assert problem is not None and problem.startswith(said)


@pytest.mark.parametrize(
    "colour",
    [
        "rgb(\u0664\u0661,98,255)",  # Arabic-Indic 41: int() reads it as 41
        "rgb(41,\uff19\uff18,255)",  # full-width 98
        "rgba(41,98,255,\u0660.5)",  # an Arabic-Indic 0 before the alpha's point
        "rgb(41,\u300098,255)",  # an ideographic space before a channel
    ],
)
def test_a_colour_holds_ascii_digits_and_spaces_only(colour: str) -> None:
    assert value_problem("rgb(41, 98, 255)", Parameter("p", "Color")) is None  # the same, in ASCII
    problem = value_problem(colour, Parameter("p", "Color"))
    said = "must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA (e.g. rgb(41,98,255))"
    assert problem is not None and problem.endswith(said), problem


def test_a_type_without_a_rule_of_its_own_takes_anything() -> None:
    assert value_problem(object(), Parameter("p", "Source")) is None


def test_an_object_with_documented_keys_is_checked_key_by_key() -> None:
    levels = Parameter("levels", "Object", properties={"level": Parameter("level", "Integer", minimum=1)})
    assert [(p.path, p.message) for p in _value_problems(("x",), [], levels)] == [
        (("x",), "[] must be an object")
    ]
    found = [(p.path, p.message) for p in _value_problems(("x",), {"level": 0, "other": 1}, levels)]
    assert found == [
        (("x", "level"), "0 is below the documented minimum 1"),
        (("x", "other"), "is not a key of 'levels' CHART-IMG documents"),
    ]
    assert _value_problems(("x",), {"anything": 1}, Parameter("o", "Object")) == []


def test_every_problem_of_a_request_is_listed() -> None:
    assert problems({"bogus": 1, "range": "2W", "shiftLeft": 0, "theme": "blue"}) == [
        (("request", "bogus"), "is not an Advanced Chart parameter CHART-IMG documents"),
        (
            ("request", "range"),
            "'2W' is not a documented range preset (1D, 5D, 1M, 3M, 6M, 1Y, 5Y, ALL, DTD, WTD, MTD, YTD)",
        ),
        (("request", "shiftLeft"), "0 is below the documented minimum 1"),
        (("request", "theme"), "'blue' must be one of light, dark"),
    ]


def test_a_timezone_outside_the_table_suggests_a_close_one_only() -> None:
    assert problems({"timezone": "Europe/Lndn"}) == [
        (
            ("request", "timezone"),
            f"'Europe/Lndn' is not in CHART-IMG's Supported Timezone table (did you mean "
            f"'Europe/London'?) {EXAMPLES}",
        )
    ]
    # "UTC" is 0.6 alike "Etc/UTC": too far to suggest; a number suggests nothing
    assert problems({"timezone": "UTC"}) == [
        (("request", "timezone"), f"'UTC' is not in CHART-IMG's Supported Timezone table {EXAMPLES}")
    ]
    assert problems({"timezone": 5}) == [
        (("request", "timezone"), f"5 is not in CHART-IMG's Supported Timezone table {EXAMPLES}")
    ]


def test_a_range_object_needs_from_before_to_and_nothing_else() -> None:
    assert problems({"range": {"from": "2023-01-01T00:00:00Z", "extra": 1}}) == [
        (("request", "range", "extra"), "is not a range key CHART-IMG documents"),
        (("request", "range", "to"), "is required in a range object"),
    ]
    same = "2023-01-01T00:00:00Z"
    assert problems({"range": {"from": same, "to": same}}) == [
        (("request", "range", "to"), f"{same!r} must be after from")
    ]
    # 01:00 at +02:00 is 23:00 UTC the day before; a moment without offset is UTC
    assert problems({"range": {"from": "2023-01-01T01:00:00+02:00", "to": "2023-01-01T00:00:00"}}) == []


def test_overrides_are_checked_against_the_style_the_request_draws() -> None:
    bad_colour = {"style": {"candleStyle.upColor": 5}}
    assert problems({"override": bad_colour}) == [  # candle: the documented default style
        (
            ("request", "override", "style", "candleStyle.upColor"),
            "5 must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA (e.g. rgb(41,98,255))",
        )
    ]
    assert problems({"style": "line", "override": bad_colour}) == [
        (
            ("request", "override", "style", "candleStyle.upColor"),
            "is not an override.style key of style 'line' CHART-IMG documents",
        )
    ]
    assert problems({"style": ["line"], "override": bad_colour})[1:] == []  # the style's own problem only
    assert problems({"override": [1]}) == [(("request", "override"), "[1] must be an object")]


def test_every_override_problem_is_listed() -> None:
    override = {"bogus": 1, "priceRange": {"margin": "x", "edge": 1}, "showLegend": {"on": True}}
    assert problems({"override": override}) == [
        (("request", "override", "bogus"), "is not a chart override CHART-IMG documents"),
        (("request", "override", "priceRange", "margin"), "'x' must be a number"),
        (
            ("request", "override", "priceRange", "edge"),
            "is not an override.priceRange key CHART-IMG documents",
        ),
        (("request", "override", "showLegend"), "{'on': True} must be true or false"),
    ]


def test_every_study_and_drawing_problem_is_listed() -> None:
    studies = [
        7,  # not an object: core.templates.template_rules names it
        {"name": ["x"]},  # nor a name
        {"name": "Bogus", "extra": 1},
        {"name": "Aroon", "forceOverlay": "yes", "input": {"nope": 1}},
        {"name": "Bogus2"},
    ]
    drawings = [{"name": "Horizontal Line", "input": {"text": 1}, "override": {"fontSize": "big", "x": 1}}]
    found = problems({"studies": studies, "drawings": drawings})
    assert found == [
        (("request", "studies", 2, "extra"), "is not a key of a study entry CHART-IMG documents"),
        (("request", "studies", 2, "name"), "'Bogus' is not a study CHART-IMG documents"),
        (("request", "studies", 3, "input", "nope"), "is not an input key of 'Aroon' CHART-IMG documents"),
        (("request", "studies", 3, "forceOverlay"), "'yes' must be true or false"),
        (("request", "studies", 4, "name"), "'Bogus2' is not a study CHART-IMG documents"),
        (("request", "drawings", 0, "input", "text"), "1 must be a string"),
        (("request", "drawings", 0, "override", "fontSize"), "'big' must be an integer"),
        (
            ("request", "drawings", 0, "override", "x"),
            "is not an override key of 'Horizontal Line' CHART-IMG documents",
        ),
        (("request", "drawings", 0, "input", "price"), "is required by a 'Horizontal Line' drawing"),
    ]
    assert problems({"studies": 5, "drawings": "Horizontal Line"}) == []  # template_rules names them


def test_every_value_problem_of_one_override_object_is_listed() -> None:
    override = {"bogus": 1, "style": {"candleStyle.upColor": 5}, "priceRange": {"margin": "x", "from": "y"}}
    assert problems({"override": override}) == [
        (("request", "override", "bogus"), "is not a chart override CHART-IMG documents"),
        (
            ("request", "override", "style", "candleStyle.upColor"),
            "5 must be a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA (e.g. rgb(41,98,255))",
        ),
        (("request", "override", "priceRange", "margin"), "'x' must be a number"),
        (("request", "override", "priceRange", "from"), "'y' must be a number"),
    ]
