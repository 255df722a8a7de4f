"""A layout template (`layout: {layoutId, private, session, request}`): the one rule set checks it
as it checks an Advanced Chart template (the schema, the rules, the Shared Layout section's
documented fields), a template has exactly one kind, a layout id is refused unless it is fit
for a URL's path, and its request body and digest are built from it."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from harness.builders import load_templates
from worker_chart_export.bundled.contracts import CHART_TEMPLATE, schema_errors
from worker_chart_export.core.chart_img.plans import PLANS, Plan
from worker_chart_export.core.templates.chart_request import body_digest, request_digest
from worker_chart_export.core.templates.template_check import template_problems
from worker_chart_export.core.templates.template_rules import LAYOUT_ID
from worker_chart_export.core.types import ChartCall, ChartEndpoint, LayoutTarget

BASIC, PRO, ULTRA = PLANS["BASIC"], PLANS["PRO"], PLANS["ULTRA"]
BUNDLED = "my_tradingview_layout_v1"


def layout_template(**layout: Any) -> dict[str, Any]:
    template = copy.deepcopy(load_templates()[BUNDLED])
    template["layout"].update(layout)
    return template


def with_body(**request: Any) -> dict[str, Any]:
    template = layout_template()
    template["layout"]["request"].update(request)
    return template


def found(template: Any, plan: Plan = BASIC) -> list[tuple[str, str]]:
    return [(p.suffix, p.message) for p in template_problems(template, plan)]


def test_the_bundled_layout_template_passes_the_rules_and_the_schema_on_every_plan() -> None:
    template = load_templates()[BUNDLED]
    assert "request" not in template and template["layout"]["layoutId"] == "37wLAGgd"
    for plan in PLANS.values():
        assert found(template, plan) == []
    assert schema_errors(CHART_TEMPLATE, template) == []


def test_a_layout_with_nothing_but_its_id_passes() -> None:
    template = layout_template()
    template["layout"] = {"layoutId": "OKyFXMzN"}
    assert found(template) == []


def test_a_template_has_exactly_one_kind() -> None:
    both = layout_template()
    both["request"] = {"width": 800}
    neither = layout_template()
    del neither["layout"]
    assert found(both) == [
        (
            "",
            "must have exactly one of request (an Advanced Chart body) or layout (a TradingView layout: "
            "{layoutId, private, session, request}), not both",
        )
    ]
    assert found(neither) == [
        (
            "",
            "must have exactly one of request (an Advanced Chart body) or layout (a TradingView layout: "
            "{layoutId, private, session, request})",
        )
    ]
    assert schema_errors(CHART_TEMPLATE, both) and schema_errors(CHART_TEMPLATE, neither)


@pytest.mark.parametrize(
    "layout_id",
    [
        "../../v1/x",  # a path of its own
        "37wLAGgd/..",
        "37wLAGgd?x=1",  # a query
        "37wLAGgd%2F",
        "OKy FXMzN",
        "",
        "A" * 33,  # longer than any layout id
        "٤١٢٣",  # digits, but not ASCII ones
        "ＯＫｙ",  # full-width letters
        "37wLAGgd\n",
        8,
        None,
    ],
)
def test_a_layout_id_unfit_for_a_url_path_is_refused_naming_it(layout_id: Any) -> None:
    template = layout_template(layoutId=layout_id)
    if layout_id is None:
        del template["layout"]["layoutId"]
    problems = dict(found(template))
    assert ".layout.layoutId" in problems, problems
    if layout_id != "37wLAGgd\n":  # Python's `$` (jsonschema's) also matches before a last \n; ECMA's not
        assert "layoutId" in " ".join(schema_errors(CHART_TEMPLATE, template))  # the schema agrees


def test_layout_ids_the_docs_show_are_accepted() -> None:
    # "For example, OKyFXMzN in the URL is a LAYOUT_ID."; the curl example's 37wLAGgd
    assert all(LAYOUT_ID.fullmatch(i) for i in ("OKyFXMzN", "37wLAGgd", "A" * 32))


def test_private_and_session_are_held_to_their_shapes_without_showing_a_session() -> None:
    value = "3kq9x0vlmy8fa1q7zw0r2a3b4c5d6e7f"  # a session's value typed where its id goes
    problems = dict(found(layout_template(private="yes", session=f"{value} sign")))
    assert problems[".layout.private"] == "'yes' must be true or false"
    assert problems[".layout.session"].startswith("must name a configured TradingView session by its id")
    assert value not in json.dumps(found(layout_template(private="yes", session=f"{value} sign")))
    assert found(layout_template(private=True, session="tv-main")) == []


@pytest.mark.parametrize(
    ("request_change", "path", "message"),
    [
        ({"symbol": "BINANCE:ETHUSDT"}, ".layout.request.symbol", "must not be set by a template"),
        ({"interval": "4h"}, ".layout.request.interval", "must not be set by a template"),
        ({"format": "jpeg"}, ".layout.request.format", "'jpeg' must be 'png'"),
        ({"width": 1920}, ".layout.request.width", "1920 exceeds the BASIC plan's maximum 800"),
        ({"height": 299}, ".layout.request.height", "299 is below CHART-IMG's minimum 300"),
        ({"zoomIn": 26}, ".layout.request.zoomIn", "26 is above the documented maximum 25"),
        ({"zoomOut": 0}, ".layout.request.zoomOut", "0 is below the documented minimum 1"),
        ({"moveLeft": 51}, ".layout.request.moveLeft", "51 is above the documented maximum 50"),
        ({"moveRight": 2.5}, ".layout.request.moveRight", "2.5 must be an integer"),
        ({"resetZoom": "yes"}, ".layout.request.resetZoom", "'yes' must be true or false"),
        ({"watermark": "ACME"}, ".layout.request.watermark", "custom watermarks are for the ENTERPRISE"),
        ({"timezone": "Etc/UTC"}, ".layout.request.timezone", "is not a Shared Layout parameter"),
        ({"studies": []}, ".layout.request.studies", "is not a Shared Layout parameter"),
        ({"zoomin": 3}, ".layout.request.zoomin", "did you mean 'zoomIn'?"),
    ],
)
def test_each_layout_body_field_is_held_to_the_shared_layout_section(
    request_change: dict[str, Any], path: str, message: str
) -> None:
    problems = found(with_body(**request_change))
    assert [p for p, _ in problems].count(path) == 1, problems
    assert message in dict(problems)[path]


def test_the_plan_decides_a_layouts_size_and_watermark() -> None:
    big = with_body(width=1920, height=1080, watermark="ACME", watermarkOpacity=0.5)
    assert {p for p, _ in found(big, PRO)} == {
        ".layout.request.watermark",
        ".layout.request.watermarkOpacity",
    }
    assert found(big, ULTRA) == []


def layout_call(layout_id: str, body: dict[str, Any], *, session: str | None = None) -> ChartCall:
    return ChartCall(
        "run1",
        "charts",
        BUNDLED,
        "BINANCE:BTCUSDT",
        "1h",
        body,
        f"BINANCE_BTCUSDT__1h__{BUNDLED}",
        layout=LayoutTarget(layout_id, private=session is not None, session=session),
    )


def canonical_sha256(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def test_a_layout_requests_digest_covers_endpoint_layout_and_body_and_never_a_session() -> None:
    body = {"width": 800, "symbol": "BINANCE:BTCUSDT", "interval": "1h"}
    call = layout_call("37wLAGgd", body)
    assert call.endpoint is ChartEndpoint.LAYOUT_CHART
    expected = canonical_sha256({"endpoint": "layout-chart", "layoutId": "37wLAGgd", "body": body})
    assert request_digest(call) == expected
    assert request_digest(layout_call("37wLAGgd", body, session="tv-main")) == expected
    assert request_digest(layout_call("OKyFXMzN", body)) != expected
    assert request_digest(layout_call("37wLAGgd", {**body, "width": 801})) != expected
    advanced = ChartCall("run1", "charts", BUNDLED, "BINANCE:BTCUSDT", "1h", body, "k")
    assert request_digest(advanced) == body_digest(body) == canonical_sha256(body) != expected
