"""CHART-IMG's documented lists (contracts/chart-img/) load, are well-formed, say what the docs
say (spot checks against lines quoted from doc.chart-img.com), and cover what we ship: every
study, drawing and request field our chart templates use is documented."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.builders import REPO, load_templates
from worker_chart_export.bundled import chart_img_docs as docs
from worker_chart_export.bundled import chart_img_docs_dir, layout_docs
from worker_chart_export.core.chart_img import plans as core_plans
from worker_chart_export.core.templates import template_rules

FOLDER = REPO / "contracts" / "chart-img"
SCHEMA = json.loads((FOLDER / docs.SCHEMA).read_text())


def validator_for(file_name: str) -> Draft202012Validator:
    """The schema's $defs entry for one file (studies.json -> #/$defs/studies)."""
    return Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{Path(file_name).stem}"})


def raw(file_name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FOLDER / file_name).read_text(encoding="utf-8"))
    return loaded


# --- well-formed ---------------------------------------------------------------------------


def test_the_checkout_reads_the_folder_of_the_repository() -> None:
    assert chart_img_docs_dir() == FOLDER
    assert {p.name for p in FOLDER.glob("*.json")} == {*docs.FILES, docs.SCHEMA}


def test_the_schema_is_valid_draft_2020_12() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("file_name", docs.FILES)
def test_each_file_matches_its_schema_and_names_its_source(file_name: str) -> None:
    document = raw(file_name)
    assert [e.message for e in validator_for(file_name).iter_errors(document)] == []
    copy = document["source"]["publicCopy"]
    assert (copy["repository"], copy["path"]) == (
        "https://github.com/johnpaul-aquino/charttalk",
        ".docs/chart-img-raw-documentation",
    )
    assert copy["commit"] == docs.source().commit  # every file from the same copy
    assert document["documentedAsOf"] == "2025-11-26"  # the copy's newest Recent Changes entry


@pytest.mark.parametrize(
    ("file_name", "change"),
    [
        ("studies.json", lambda d: d["studies"][0].pop("name")),
        ("studies.json", lambda d: d["studies"][0]["input"].update(x={"type": "Number"})),
        ("drawings.json", lambda d: d["drawings"][0].pop("zOrder")),
        ("intervals.json", lambda d: d["intervals"].append({"interval": "7x", "documentedIn": "t"})),
        (
            "timezones.json",
            lambda d: d["timezones"].append({"timezone": "Mars", "country": "MA", "utcOffset": "UTC"}),
        ),
        ("errors.json", lambda d: d["examples"].update({"200": [{}]})),
        ("studies.json", lambda d: d["source"]["publicCopy"].update(commit="main")),
    ],
)
def test_the_schema_refuses_a_broken_file(file_name: str, change: Any) -> None:
    document = raw(file_name)
    change(document)
    assert list(validator_for(file_name).iter_errors(document)) != []


@pytest.mark.parametrize("file_name", docs.FILES)
def test_files_are_as_the_extractor_writes_them(file_name: str) -> None:
    """No hand edits: the files are in the extractor's own layout (refresh = run it again)."""
    text = (FOLDER / file_name).read_text(encoding="utf-8")
    assert extractor().rendered(json.loads(text)) == text


@cache
def extractor() -> ModuleType:
    """scripts/extract_chart_img_docs.py, imported from its path (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "extract_chart_img_docs", REPO / "scripts" / "extract_chart_img_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# --- counts: the docs' sections --------------------------------------------------------------


def test_counts_match_the_sections_of_the_docs() -> None:
    # TradingView Chart Indicators has 92 subsections, Chart Drawings 15, the v2 timezone
    # table 81 rows, the v2 interval list 21 values (+ 2m from the changelog of 2025-11-26)
    assert (len(docs.studies()), len(docs.drawings()), len(raw("timezones.json")["timezones"])) == (
        92,
        15,
        81,
    )
    assert docs.timezones() - {z["timezone"] for z in raw("timezones.json")["timezones"]} == {"Etc/UTC"}
    assert (len(docs.intervals().values), docs.intervals().changelog_only) == (22, frozenset({"2m"}))
    for file_name, key in (
        ("studies.json", "studies"),
        ("drawings.json", "drawings"),
        ("timezones.json", "timezones"),
    ):
        document = raw(file_name)
        assert document["count"] == len(document[key])
    names = [s["name"] for s in raw("studies.json")["studies"]]
    assert len(set(names)) == len(names)


def test_each_documented_example_uses_its_own_name_and_documented_keys() -> None:
    for item in (*docs.studies().values(), *docs.drawings().values()):
        assert item.example["name"] == item.name
        for part in ("input", "override"):
            sent = set(item.example.get(part, {}))
            known = set(getattr(item, part)) | set(item.example_only_keys.get(part, ()))
            assert sent <= known, (item.name, part, sent - known)


def test_the_only_keys_documented_by_example_alone() -> None:
    # Fib Retracement's example sends extendLines; its table documents extendLine
    found = {
        i.name: dict(i.example_only_keys)
        for i in (*docs.studies().values(), *docs.drawings().values())
        if i.example_only_keys
    }
    assert found == {"Fib Retracement": {"override": ("extendLines",)}}


# --- spot checks: lines quoted from the docs --------------------------------------------------


@pytest.mark.parametrize(
    ("study", "part", "line"),
    [
        ("Bollinger Bands", "input", "in_0\tInteger\t20\tlength (Min: 1, Max: 10000)"),
        ("Bollinger Bands", "input", "in_1\tFloat\t2\tmult (Min: 0.001, Max: 50)"),
        ("Relative Strength Index", "input", "length\tInteger\t14\tlength (Min: 1, Max: 2000)"),
        ("MACD", "input", "in_3\tString\tclose\tsource [open, high, low, close, hl2, hlc3, ohlc4]"),
        ("Moving Average Exponential", "input", "smoothingLine\tString\tSMA\tsmoothing line [SMA, EMA, WMA]"),
        ("Parabolic SAR", "input", "in_2\tFloat\t0.2\tmaximum (Min: -100000, Max: 100000)"),
        ("Accumulative Swing Index", "input", "in_0\tFloat\t10\tlimit move value (Min: 0.1, Max: 100000)"),
        ("MACD", "override", "Signal.linewidth\tInteger\t1\t(Min: 1, Max: 10)"),
        ("Volume", "override", "Volume.color.0\tColor\trgba(247,82,95,0.5)\t■"),
        (
            "Williams %R",
            "override",
            "LowerLimit.visible\tBoolean\ttrue\t-",
        ),  # the docs print UpperLimit twice
        (
            "True Strength Index",
            "override",
            "Signal.color\tColor\trgb(233,30,99)\t■",
        ),  # scraped 'Color2196F3'
    ],
)
def test_a_study_row_says_what_the_docs_line_says(study: str, part: str, line: str) -> None:
    name, kind, default, description = line.split("\t")
    parameter = getattr(docs.studies()[study], part)[name]
    assert parameter.type == kind
    assert str(parameter.default).lower() == default.lower() or float(parameter.default) == float(default)
    if "(Min:" in description:
        bounds = description.split("(Min: ")[1].rstrip(")").split(", Max: ")
        assert (parameter.minimum, parameter.maximum) == tuple(float(b) for b in bounds)
    if "[" in description:
        assert list(parameter.choices or ()) == description.split("[")[1].rstrip("]").split(", ")


def test_studies_without_an_input_table() -> None:
    assert sorted(n for n, keys in docs.study_input_keys().items() if not keys) == [
        "Accumulation/Distribution", "Awesome Oscillator", "Balance of Power", "Chop Zone",
        "Klinger Oscillator", "Net Volume", "Price Volume Trend", "VWAP", "Volume",
    ]  # fmt: skip


def test_drawing_spot_checks() -> None:
    order_line, fib = docs.drawings()["Order Line"], docs.drawings()["Fib Retracement"]
    # "text String Yes - order line text" / "price Float No {LAST_PRICE} order line price point"
    assert (order_line.input["text"].required, order_line.input["price"].required) == (True, False)
    assert order_line.input["price"].default is None  # {LAST_PRICE} is not a value
    assert docs.drawings()["Horizontal Line"].input["price"].type == "Float"
    assert docs.drawings()["Trend Line"].override["fontSize"].minimum == 10
    # level{#} Object, with "Parameter level7 ... coeff Float 1"
    assert fib.override["level7"].properties["coeff"].default == 1
    assert "level{#}" not in fib.override and len([k for k in fib.override if k.startswith("level")]) == 11
    assert all(
        d.z_order is not None and d.z_order.choices == ("top", "bottom") for d in docs.drawings().values()
    )
    assert list(docs.drawings())[:3] == ["Order Line", "Trend Line", "Horizontal Line"]


def test_request_bounds_spot_checks() -> None:
    bounds = docs.request_bounds()
    # "shiftLeft Integer - set chart position to left (Min: 1, Max: 1000)"
    assert (bounds.body["shiftLeft"].minimum, bounds.body["shiftLeft"].maximum) == (1, 1000)
    assert (bounds.body["shiftRight"].minimum, bounds.body["shiftRight"].maximum) == (1, 1000)
    # "mainPaneHeight Integer - override the main pane height (Min: 100, Max: 1800)"
    assert (bounds.override["mainPaneHeight"].minimum, bounds.override["mainPaneHeight"].maximum) == (
        100,
        1800,
    )
    assert bounds.price_range["margin"].default == 0.0025
    assert (bounds.body["symbol"].default, bounds.body["interval"].default) == ("BINANCE:BTCUSDT", "1D")
    assert (bounds.body["theme"].default, bounds.body["theme"].choices) == ("light", ("light", "dark"))
    assert bounds.body["format"].choices == ("png", "jpeg")
    assert bounds.body["watermarkSize"].choices == (16, 32, 64, 128)
    assert bounds.range_presets[-4:] == ("DTD", "WTD", "MTD", "YTD")
    assert all(p.required for p in bounds.range_object.values()) and set(bounds.range_object) == {
        "from",
        "to",
    }
    assert bounds.custom_watermark_plans == {"ULTRA", "ENTERPRISE"}
    # watermarkSize names no plan: every plan may send it (issue 26)
    assert bounds.watermark_fields == ("watermark", "watermarkOpacity")
    assert set(bounds.style_override) == set(bounds.body["style"].choices or ())
    assert bounds.style_override["line"]["lineStyle.linewidth"].maximum == 10


def test_timezones_intervals_symbols_errors_spot_checks() -> None:
    assert {"Etc/UTC", "Asia/Kathmandu", "America/Argentina/Buenos_Aires", "US/Mountain"} <= docs.timezones()
    kathmandu = next(z for z in raw("timezones.json")["timezones"] if z["timezone"] == "Asia/Kathmandu")
    assert kathmandu == {"timezone": "Asia/Kathmandu", "country": "NP", "utcOffset": "UTC +05:45"}
    assert docs.intervals().values[:3] == ("1m", "2m", "3m") and docs.intervals().default == "1D"
    symbols = docs.symbols()
    assert "CME_MINI:ES1!" in symbols.continuous_futures_examples
    assert "BYBIT:BTCUSDT.P" in symbols.perpetual_examples
    assert (symbols.formula_example, symbols.formula_since) == (
        "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10",
        "2025-01-03",
    )
    assert symbols.formula_operators_in_example == ("(", ")", "+", "/")
    assert "BMV:CEMEX/CPO" in symbols.examples  # a plain symbol with a '/'
    errors = docs.errors()
    assert errors.messages(504) == {"External Request Timeout", "Endpoint request timed out"}
    assert errors.messages(401) == {"Invalid Request"} and 401 not in errors.status_types
    assert errors.status_types[400] == "Bad Request" and errors.messages(400) == frozenset()


# --- Shared Layout ------------------------------------------------------------------------

# the docs' Shared Layout section as the public copy has it, under the two headings the
# extractor finds it by (tests/unit/bundled/data/: lines 1435-1498 of the copy, verbatim)
SHARED_LAYOUT = Path(__file__).parent / "data" / "shared_layout_excerpt.txt"


def excerpt(*replaced: tuple[str, str]) -> Any:
    text = SHARED_LAYOUT.read_text(encoding="utf-8")
    for old, new in replaced:
        assert old in text
        text = text.replace(old, new)
    return extractor().Doc(text.split("\n"))


def test_layout_bounds_are_what_the_extractor_reads_from_the_section() -> None:
    written = raw("layout_bounds.json")
    origin = extractor().Origin(**{
        "commit": written["source"]["publicCopy"]["commit"],
        "committed_at": written["source"]["publicCopy"]["committedAt"],
        "retrieved": written["retrieved"],
        "sha256": written["source"]["publicCopy"]["sha256"],
        "documented_as_of": written["documentedAsOf"],
    })  # fmt: skip
    assert extractor().layout_bounds_file(excerpt(), origin) == written


@pytest.mark.parametrize(
    "changed",
    [
        ("Please set the minimum timeout to 60 seconds", "Please allow 60 seconds"),
        ("POST /v2/tradingview/layout-chart/<LAYOUT_ID>", "POST /v3/tradingview/layout-chart/<LAYOUT_ID>"),
        ("moveRight\tInteger\t-\t", "moveRight\tInteger\t"),
        ("If default values are the same", "Defaults need not be sent"),
    ],
)
def test_the_extractor_stops_at_a_shared_layout_line_it_does_not_expect(changed: tuple[str, str]) -> None:
    origin = extractor().Origin("0" * 40, "2026-01-12", "2026-11-23", "0" * 64, "2025-11-26")
    with pytest.raises(extractor().DocError):
        extractor().layout_bounds_file(excerpt(changed), origin)


def test_layout_bounds_spot_checks() -> None:
    bounds = layout_docs.layout_bounds()
    # "POST /v2/tradingview/layout-chart/<LAYOUT_ID>"
    assert bounds.path_for("37wLAGgd") == "/v2/tradingview/layout-chart/37wLAGgd"
    # "For example, OKyFXMzN in the URL is a LAYOUT_ID."; the curl example's 37wLAGgd
    assert bounds.layout_id_examples == ("OKyFXMzN", "37wLAGgd")
    # "Please set the minimum timeout to 60 seconds to ensure the process is completed successfully."
    assert bounds.minimum_timeout_seconds == 60
    assert bounds.session_headers == ("tradingview-session-id", "tradingview-session-id-sign")
    assert bounds.sessions.startswith("To access your private layout or invite-only indicators, both")
    # "zoomIn Integer - override layout chart zoom (Min: 1, Max: 25)"
    assert (bounds.body["zoomIn"].minimum, bounds.body["zoomIn"].maximum) == (1, 25)
    # "moveLeft Integer - override layout chart position to left (Min: 1, Max: 50)"
    assert (bounds.body["moveLeft"].minimum, bounds.body["moveLeft"].maximum) == (1, 50)
    assert (bounds.body["resetZoom"].type, bounds.body["resetZoom"].default) == ("Boolean", False)
    assert (bounds.body["width"].minimum, bounds.body["height"].minimum) == (400, 300)
    assert bounds.body["format"].choices == ("png", "jpeg")
    assert bounds.body["symbol"].default is None  # {LAYOUT_SYMBOL}: the layout's own
    assert set(bounds.body) == {
        "symbol", "interval", "width", "height", "format", "resetZoom", "zoomIn", "zoomOut",
        "moveLeft", "moveRight", "watermark", "watermarkSize", "watermarkOpacity",
    }  # fmt: skip


# --- what we ship uses only documented names and keys --------------------------------------


def documented_key_problems(
    items: list[Mapping[str, Any]], known: Mapping[str, docs.DocumentedItem]
) -> list[str]:
    problems = []
    for entry in items:
        item = known.get(entry.get("name", ""))
        if item is None:
            problems.append(f"{entry.get('name')!r} is not documented")
            continue
        for part in ("input", "override"):
            unknown = set(entry.get(part, {})) - set(getattr(item, part))
            problems += [f"{item.name}.{part}.{key} is not documented" for key in sorted(unknown)]
    return problems


@pytest.mark.parametrize("template_id", sorted(t for t, d in load_templates().items() if "layout" in d))
def test_our_layout_templates_use_only_documented_fields_and_values(template_id: str) -> None:
    layout = load_templates()[template_id]["layout"]
    assert re.fullmatch(r"[A-Za-z0-9]+", layout["layoutId"])
    documented = layout_docs.layout_bounds().body
    for name, value in layout.get("request", {}).items():
        spec = documented[name]
        assert {"Integer": int, "Boolean": bool, "String": str}[spec.type] is type(value), name
        assert spec.minimum is None or value >= spec.minimum, name
        assert spec.maximum is None or value <= spec.maximum, name
    exchange = load_templates()[template_id]["chartImgSymbolTemplate"].partition(":")[0]
    assert exchange in docs.symbols().exchanges


@pytest.mark.parametrize("template_id", sorted(t for t, d in load_templates().items() if "request" in d))
def test_our_templates_use_only_documented_names_keys_and_values(template_id: str) -> None:
    request = load_templates()[template_id]["request"]
    bounds = docs.request_bounds()
    assert set(request) <= set(bounds.body), set(request) - set(bounds.body)
    assert documented_key_problems(request.get("studies", []), docs.studies()) == []
    assert documented_key_problems(request.get("drawings", []), docs.drawings()) == []
    for field_name in ("style", "theme", "format", "scale"):
        if field_name in request:
            assert request[field_name] in (bounds.body[field_name].choices or ()), field_name
    assert request.get("timezone", "Etc/UTC") in docs.timezones()
    exchange = load_templates()[template_id]["chartImgSymbolTemplate"].partition(":")[0]
    assert exchange in docs.symbols().exchanges


def test_the_key_check_finds_an_undocumented_name_and_key() -> None:
    studies = [{"name": "Relative Strength Index", "inputs": {}, "input": {"lenght": 14}}, {"name": "RSI"}]
    assert documented_key_problems(studies, docs.studies()) == [
        "Relative Strength Index.input.lenght is not documented",
        "'RSI' is not documented",
    ]


# --- the code's own copies agree with the docs ---------------------------------------------


def test_core_plans_match_the_documented_request_limits() -> None:
    documented = docs.request_bounds().plans
    assert set(documented) == set(core_plans.PLANS)
    for name, plan in core_plans.PLANS.items():
        row = documented[name]
        assert (plan.max_width, plan.max_height, plan.max_parameters) == (
            row.max_width,
            row.max_height,
            row.max_studies_plus_drawings,
        )
        floors = [
            int(str(v).replace(",", "").rstrip("+")) for v in (row.req_per_second, row.burst, row.daily_max)
        ]
        assert [plan.rate_per_second, plan.burst, plan.daily_limit] == floors, name
    body = docs.request_bounds().body
    assert (body["width"].minimum, body["height"].minimum) == (core_plans.MIN_WIDTH, core_plans.MIN_HEIGHT)


def test_template_rules_lists_match_the_docs() -> None:
    bounds = docs.request_bounds()
    assert docs.intervals().values == template_rules.CHART_IMG_INTERVALS
    assert bounds.body["scale"].choices == template_rules.SCALES
    z_orders = {d.z_order.choices for d in docs.drawings().values() if d.z_order is not None}
    assert z_orders == {template_rules.Z_ORDERS}


# --- the loader ------------------------------------------------------------------------------


def test_views_are_read_only_and_read_once() -> None:
    assert docs.studies() is docs.studies() and docs.document(docs.STUDIES) is docs.document(docs.STUDIES)
    with pytest.raises(TypeError):
        docs.studies()["x"] = docs.studies()["MACD"]  # type: ignore[index]
    with pytest.raises(TypeError):
        docs.studies()["MACD"].example["name"] = "y"  # type: ignore[index]
    assert isinstance(docs.request_bounds().range_presets, tuple)
    with pytest.raises(ValueError, match="not one of CHART-IMG's documented lists"):
        docs.document("../flow_run.schema.json")
