"""What CHART-IMG accepts in a chart template, as pure rules (doc.chart-img.com, Snapshot v2
Advanced Chart and Shared Layout parameters, Resolution Limit and Parameter Limit tables):
the template's own fields, the plan's maxima (they depend on the CHART_IMG_PLAN setting),
and what the worker itself needs (a PNG, the market left to it, a layout id fit for a URL).

A template is one of two kinds: `request` (an Advanced Chart body fragment) or `layout`
(`{layoutId, private?, session?, request?}`: the user's own TradingView layout, drawn by the
Shared Layout endpoint with its community, invite-only and private indicators).

One part of the rule set `core.templates.template_check.template_problems` applies, beside the JSON
Schema and the documented lists (`core.templates.documented_rules`); step validation and `templates
sync` both call that one function.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker_chart_export.core.chart_img.plans import MIN_HEIGHT, MIN_WIDTH, Plan
from worker_chart_export.core.templates.chart_request import SYMBOL_PLACEHOLDER, resolve_chart_img_symbol
from worker_chart_export.core.templates.symbols import symbol_problem

# The Advanced Chart v2 `interval` values (2m, 8h, 2D, 3D added Nov 2025).
CHART_IMG_INTERVALS = (
    "1m", "2m", "3m", "5m", "15m", "30m", "45m", "1h", "2h", "3h", "4h", "6h", "8h", "12h",
    "1D", "2D", "3D", "1W", "1M", "3M", "6M", "1Y",
)  # fmt: skip
SCALES = ("regular", "percent", "indexedTo100", "logarithmic")
Z_ORDERS = ("top", "bottom")
FORBIDDEN_REQUEST_FIELDS = ("symbol", "interval")  # the worker sets the market
IMAGE_FORMAT = "png"  # CHART-IMG also renders jpeg; the worker stores PNGs and checks each one
# A TradingView layout id becomes a segment of the URL's path: ASCII letters and digits only,
# bounded (the docs write no grammar; their examples are OKyFXMzN and 37wLAGgd).
LAYOUT_ID = re.compile(r"[A-Za-z0-9]{1,32}", re.ASCII)
# A configured TradingView session's id (not its value): the shape of an account's id.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
KINDS = ("request", "layout")  # a template has exactly one
# A name shown as it is in a path; any other key (from Firestore: untrusted) is quoted.
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class TemplateProblem:
    path: Path  # inside the template, e.g. ("request", "drawings", 0, "input")
    message: str

    @property
    def suffix(self) -> str:
        """The path as `.request.drawings[0].input` (JSON path without its `$`); a key that is
        not a plain name is quoted and cut short: `.request.override['Plot.color']`."""
        return "".join(_path_part(p) for p in self.path)


def _path_part(part: str | int) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if _PLAIN_KEY.fullmatch(part) else f"[{shown(part)}]"


def rule_problems(template: Mapping[str, Any], plan: Plan) -> list[TemplateProblem]:
    """Every reason these rules find for CHART-IMG (or the worker) to refuse this template
    under `plan`; the whole rule set is `core.templates.template_check.template_problems`."""
    problems: list[TemplateProblem] = []
    symbol_template = template.get("chartImgSymbolTemplate")
    if not isinstance(symbol_template, str) or SYMBOL_PLACEHOLDER not in symbol_template:
        problems.append(TemplateProblem(("chartImgSymbolTemplate",), "must be a string containing {symbol}"))
    elif problem := symbol_problem(resolve_chart_img_symbol(symbol_template, "X"), require_exchange=False):
        # {symbol} stands for one name here; the symbol each step resolves is checked again
        problems.append(
            TemplateProblem(
                ("chartImgSymbolTemplate",),
                f"{shown(symbol_template)} does not make a TradingView symbol "
                f"(read with {{symbol}} as X): {problem}",
            )
        )
    description = template.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append(
            TemplateProblem(("description",), "must be a non-empty string (it is the manifest kind)")
        )
    kinds = [kind for kind in KINDS if kind in template]
    if len(kinds) != 1:
        both = ", not both" if kinds else ""
        problems.append(
            TemplateProblem(
                (),
                "must have exactly one of request (an Advanced Chart body) or layout (a TradingView "
                f"layout: {{layoutId, private, session, request}}){both}",
            )
        )
    elif kinds == ["layout"]:
        problems += layout_problems(template["layout"], plan)
    elif not isinstance(template["request"], Mapping):
        problems.append(TemplateProblem(("request",), "must be an object"))
    else:
        problems += request_problems(template["request"], plan)
    return problems


def layout_problems(layout: Any, plan: Plan) -> list[TemplateProblem]:
    """A layout template's `layout`: its id fit for a URL, its session's name, and its body
    fragment (Shared Layout parameters: the market left to the worker, size, a PNG)."""
    where: Path = ("layout",)
    if not isinstance(layout, Mapping):
        return [
            TemplateProblem(
                where, f"{shown(layout)} must be an object {{layoutId, private, session, request}}"
            )
        ]
    problems: list[TemplateProblem] = []
    layout_id = layout.get("layoutId")
    if problem := layout_id_problem(layout_id):
        problems.append(TemplateProblem((*where, "layoutId"), problem))
    if "private" in layout and not isinstance(layout["private"], bool):
        problems.append(
            TemplateProblem((*where, "private"), f"{shown(layout['private'])} must be true or false")
        )
    session = layout.get("session")
    if "session" in layout and not (isinstance(session, str) and SESSION_NAME.fullmatch(session)):
        problems.append(
            TemplateProblem(
                (*where, "session"),
                f"must name a configured TradingView session by its id ({SESSION_NAME.pattern}), "
                "never its value (what it holds is not shown)",
            )
        )
    request = layout.get("request", {})
    if not isinstance(request, Mapping):
        problems.append(TemplateProblem((*where, "request"), "must be an object"))
    else:
        problems += _body_problems((*where, "request"), request, plan)
    return problems


def layout_id_problem(layout_id: Any) -> str | None:
    """Why `layout_id` is no TradingView layout id the worker puts in a URL, or None."""
    if isinstance(layout_id, str) and LAYOUT_ID.fullmatch(layout_id):
        return None
    if layout_id is None:
        return "is required: the id in the layout's URL, e.g. OKyFXMzN in tradingview.com/chart/OKyFXMzN/"
    return (
        f"{shown(layout_id)} is not a TradingView layout id: 1 to 32 ASCII letters and digits "
        "(e.g. OKyFXMzN, the id in the layout's URL)"
    )


def request_problems(request: Mapping[str, Any], plan: Plan) -> list[TemplateProblem]:
    """The Advanced Chart body fragment: market left to the worker, size, scale, parameters."""
    problems = _body_problems(("request",), request, plan)
    if "scale" in request and request["scale"] not in SCALES:
        problems.append(
            TemplateProblem(
                ("request", "scale"),
                f"{shown(request['scale'])} must be one of the strings {', '.join(SCALES)}",
            )
        )
    studies = _objects(request, "studies", problems)
    drawings = _objects(request, "drawings", problems)
    for index, study in studies:
        problems += _name_problems(("request", "studies", index), study)
    for index, drawing in drawings:
        problems += _drawing_problems(("request", "drawings", index), drawing)
    count = len(studies) + len(drawings)
    if count > plan.max_parameters:
        problems.append(
            TemplateProblem(
                ("request", "drawings" if drawings else "studies"),
                f"{len(studies)} studies + {len(drawings)} drawings = {count} exceed the "
                f"{plan.name} plan's parameter limit {plan.max_parameters} (studies[] + drawings[])",
            )
        )
    return problems


def _body_problems(where: Path, request: Mapping[str, Any], plan: Plan) -> list[TemplateProblem]:
    """What every body fragment shares: the market left to the worker, a PNG, the size."""
    problems = [
        TemplateProblem((*where, name), "must not be set by a template (the worker sets it)")
        for name in FORBIDDEN_REQUEST_FIELDS
        if name in request
    ]
    if "format" in request and request["format"] != IMAGE_FORMAT:
        problems.append(
            TemplateProblem(
                (*where, "format"),
                f"{shown(request['format'])} must be {IMAGE_FORMAT!r}: the worker stores PNGs only",
            )
        )
    problems += _size_problems(where, request, "width", MIN_WIDTH, plan.max_width, plan)
    problems += _size_problems(where, request, "height", MIN_HEIGHT, plan.max_height, plan)
    return problems


def interval_problem(timeframe: Any) -> str | None:
    """Why `timeframe` is not a CHART-IMG interval, or None when it is one."""
    if isinstance(timeframe, str) and timeframe in CHART_IMG_INTERVALS:
        return None
    return f"{timeframe!r} is not a CHART-IMG interval ({' '.join(CHART_IMG_INTERVALS)})"


def _size_problems(
    where: Path, request: Mapping[str, Any], name: str, minimum: int, maximum: int, plan: Plan
) -> list[TemplateProblem]:
    if name not in request:
        return []  # CHART-IMG's default 800x600 fits every plan
    value, path = request[name], (*where, name)
    if not is_integral(value):  # 800.0 is 800: a console may store a number as a double
        return [TemplateProblem(path, f"{shown(value)} must be an integer number of pixels")]
    if value < minimum:
        return [TemplateProblem(path, f"{value} is below CHART-IMG's minimum {minimum}")]
    if value > maximum:
        return [TemplateProblem(path, f"{value} exceeds the {plan.name} plan's maximum {maximum}")]
    return []


def _objects(
    request: Mapping[str, Any], name: str, problems: list[TemplateProblem]
) -> list[tuple[int, Mapping[str, Any]]]:
    """The objects of request[name] with their index; a problem for a non-list or a non-object."""
    items = request.get(name, [])
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        problems.append(TemplateProblem(("request", name), "must be a list of objects"))
        return []
    found = []
    for index, item in enumerate(items):
        if isinstance(item, Mapping):
            found.append((index, item))
        else:
            problems.append(TemplateProblem(("request", name, index), "must be an object"))
    return found


def _name_problems(path: Path, item: Mapping[str, Any]) -> list[TemplateProblem]:
    name = item.get("name")
    if isinstance(name, str) and name.strip():
        return []
    return [TemplateProblem((*path, "name"), "must be a non-empty string (CHART-IMG requires it)")]


def _drawing_problems(path: Path, drawing: Mapping[str, Any]) -> list[TemplateProblem]:
    problems = _name_problems(path, drawing)
    if not isinstance(drawing.get("input"), Mapping):
        given = "missing" if "input" not in drawing else shown(drawing["input"])
        problems.append(
            TemplateProblem((*path, "input"), f"{given}: CHART-IMG requires a drawing's input object")
        )
    if "zOrder" in drawing and drawing["zOrder"] not in Z_ORDERS:
        problems.append(
            TemplateProblem(
                (*path, "zOrder"), f"{shown(drawing['zOrder'])} must be one of {', '.join(Z_ORDERS)}"
            )
        )
    return problems


def is_integral(value: Any) -> bool:
    """An integer, or a finite float without a fraction (`800.0`); never a bool. CHART-IMG reads
    JSON numbers, where 800.0 and 800 are the same number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def shown(value: Any) -> str:
    """A value in a message, cut short: templates come from Firestore, unchecked."""
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
