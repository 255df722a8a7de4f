"""What CHART-IMG's documentation lists for the Advanced Chart body, as pure rules over a
template's `request` (the lists: contracts/chart-img/, read by `bundled.chart_img_docs`).

Every body field must be a documented one; enumerations, types and documented bounds hold
(`shiftLeft`/`shiftRight` 1..1000, `override.mainPaneHeight` 100..1800, ...); `timezone`
is in the Supported Timezone table; `range` is a preset or a `{from, to}` object; watermark
fields only on the plans allowed to send them. Studies and drawings: documented names, entry
keys, `input` keys (where the docs have an input table) with their types and bounds, the
drawing's required inputs, and `override` keys (where documented).

What `core.templates.template_rules` already checks (market fields, size, scale, format, zOrder,
names present) is left to it. One part of `core.templates.template_check.template_problems`.
The lists are imported when a template is checked, never on the worker's no-op path.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.chart_img.plans import Plan
from worker_chart_export.core.templates.template_rules import Path, TemplateProblem, is_integral, shown

if TYPE_CHECKING:
    from worker_chart_export.bundled.chart_img_docs import DocumentedItem, Parameter, RequestBounds

# Body fields core.templates.template_rules checks (or that hold other entries, checked one by one).
_CHECKED_BY_THE_RULES = frozenset({"symbol", "interval", "width", "height", "scale", "format"})
_TYPE_WORDS = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
    "Color": "a colour: rgb(r,g,b), rgba(r,g,b,a), #RGB, #RRGGBB or #RRGGBBAA (e.g. rgb(41,98,255))",
    "DateTime (ISO8601)": "an ISO 8601 date-time string, e.g. 2023-01-01T00:00:00.000Z",
    "Object": "an object",
}


def documented_problems(request: Mapping[str, Any], plan: Plan) -> list[TemplateProblem]:
    """Every way `request` leaves what the docs list, under `plan` (watermarks)."""
    from worker_chart_export.bundled import chart_img_docs as docs

    bounds = docs.request_bounds()
    problems: list[TemplateProblem] = []
    for key, value in request.items():
        path: Path = ("request", key)
        spec = bounds.body.get(key)
        if spec is None:
            problems.append(_unknown_key(path, key, bounds.body, "an Advanced Chart parameter"))
        elif key in bounds.watermark_fields and plan.name not in bounds.custom_watermark_plans:
            allowed = " and ".join(sorted(bounds.custom_watermark_plans))
            problems.append(
                TemplateProblem(path, f"custom watermarks are for the {allowed} plans, not {plan.name}")
            )
        elif key == "timezone":
            problems += _timezone_problems(path, value, docs.timezones())
        elif key == "range":
            problems += _range_problems(path, value, bounds)
        elif key == "override":
            style = request.get("style", bounds.body["style"].default)
            problems += _override_problems(path, value, bounds, style)
        elif key == "studies":
            problems += _items_problems(path, value, docs.studies(), bounds.study_fields, "study")
        elif key == "drawings":
            problems += _items_problems(path, value, docs.drawings(), bounds.drawing_fields, "drawing")
        elif key not in _CHECKED_BY_THE_RULES:
            problems += _value_problems(path, value, spec)
    return problems


def _unknown_key(path: Path, key: str, known: Mapping[str, Any], what: str) -> TemplateProblem:
    return TemplateProblem(path, f"is not {what} CHART-IMG documents{_did_you_mean(key, known)}")


def _did_you_mean(given: Any, known: Sequence[str] | Mapping[str, Any]) -> str:
    if not isinstance(given, str):
        return ""
    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _timezone_problems(path: Path, value: Any, zones: frozenset[str]) -> list[TemplateProblem]:
    if value in zones:
        return []
    return [
        TemplateProblem(
            path,
            f"{shown(value)} is not in CHART-IMG's Supported Timezone table"
            f"{_did_you_mean(value, sorted(zones))} (e.g. Etc/UTC, America/New_York, Europe/London)",
        )
    ]


def _range_problems(path: Path, value: Any, bounds: RequestBounds) -> list[TemplateProblem]:
    presets = ", ".join(bounds.range_presets)
    if isinstance(value, str):
        if value in bounds.range_presets:
            return []
        return [TemplateProblem(path, f"{shown(value)} is not a documented range preset ({presets})")]
    if not isinstance(value, Mapping):
        return [
            TemplateProblem(path, f"{shown(value)} must be a preset ({presets}) or an object {{from, to}}")
        ]
    problems = _keys_problems(path, value, bounds.range_object, "a range key")
    problems += [
        TemplateProblem((*path, name), "is required in a range object")
        for name in bounds.range_object
        if name not in value
    ]
    start, end = _moment(value.get("from")), _moment(value.get("to"))
    if not problems and start is not None and end is not None and start >= end:
        problems.append(TemplateProblem((*path, "to"), f"{shown(value['to'])} must be after from"))
    return problems


def _override_problems(path: Path, value: Any, bounds: RequestBounds, style: Any) -> list[TemplateProblem]:
    if not isinstance(value, Mapping):
        return [TemplateProblem(path, f"{shown(value)} must be an object")]
    problems: list[TemplateProblem] = []
    for key, given in value.items():
        where: Path = (*path, key)
        if key == "style" and isinstance(given, Mapping):
            styled = bounds.style_override.get(style) if isinstance(style, str) else None
            if styled is not None:
                problems += _keys_problems(where, given, styled, f"an override.style key of style {style!r}")
        elif key == "priceRange" and isinstance(given, Mapping):
            problems += _keys_problems(where, given, bounds.price_range, "an override.priceRange key")
        else:
            problems += _keys_problems(path, {key: given}, bounds.override, "a chart override")
    return problems


def _items_problems(
    path: Path,
    entries: Any,
    documented: Mapping[str, DocumentedItem],
    fields: Mapping[str, Parameter],
    kind: str,
) -> list[TemplateProblem]:
    """studies[] or drawings[]: each entry's name, keys, input and override as documented."""
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return []  # core.templates.template_rules names it
    problems: list[TemplateProblem] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        where: Path = (*path, index)
        problems += [
            _unknown_key((*where, key), key, fields, f"a key of a {kind} entry")
            for key in entry
            if key not in fields
        ]
        name = entry.get("name")
        item = documented.get(name) if isinstance(name, str) else None
        if item is None:
            if isinstance(name, str) and name.strip():
                problems.append(
                    TemplateProblem(
                        (*where, "name"),
                        f"{shown(name)} is not a {kind} CHART-IMG documents{_did_you_mean(name, documented)}",
                    )
                )
            continue
        problems += _entry_problems(where, entry, item, fields, kind)
    return problems


def _entry_problems(
    where: Path, entry: Mapping[str, Any], item: DocumentedItem, fields: Mapping[str, Parameter], kind: str
) -> list[TemplateProblem]:
    problems: list[TemplateProblem] = []
    for part, documented in (("input", item.input), ("override", item.override)):
        given = entry.get(part)
        if not isinstance(given, Mapping) or not documented:  # no table in the docs: nothing to hold it to
            continue
        # a key the section's own example sends is documented too, with no type to hold it to
        by_example = set(item.example_only_keys.get(part, ()))
        checked = {k: v for k, v in given.items() if k not in by_example}
        problems += _keys_problems((*where, part), checked, documented, f"an {part} key of {item.name!r}")
    given_input = entry.get("input")
    if kind == "drawing" and isinstance(given_input, Mapping):
        problems += [
            TemplateProblem((*where, "input", name), f"is required by a {item.name!r} drawing")
            for name, spec in item.input.items()
            if spec.required and name not in given_input
        ]
    if "forceOverlay" in entry and "forceOverlay" in fields:  # zOrder: core.templates.template_rules
        problems += _value_problems((*where, "forceOverlay"), entry["forceOverlay"], fields["forceOverlay"])
    return problems


def _keys_problems(
    path: Path, given: Mapping[str, Any], documented: Mapping[str, Parameter], what: str
) -> list[TemplateProblem]:
    """Each key documented, each value of its documented type, choices and bounds."""
    problems: list[TemplateProblem] = []
    for key, value in given.items():
        spec = documented.get(key)
        if spec is None:
            problems.append(_unknown_key((*path, key), key, documented, what))
        else:
            problems += _value_problems((*path, key), value, spec)
    return problems


def _value_problems(path: Path, value: Any, spec: Parameter) -> list[TemplateProblem]:
    if spec.type == "Object" and spec.properties:
        if not isinstance(value, Mapping):
            return [TemplateProblem(path, f"{shown(value)} must be an object")]
        return _keys_problems(path, value, spec.properties, f"a key of {spec.name!r}")
    problem = value_problem(value, spec)
    return [] if problem is None else [TemplateProblem(path, problem)]


def value_problem(value: Any, spec: Parameter) -> str | None:
    """Why `value` is not what the docs say `spec` takes (type, choices, bounds), or None."""
    if not _has_type(value, spec.type):
        return f"{shown(value)} must be {_TYPE_WORDS.get(spec.type, spec.type)}"
    if spec.choices is not None and value not in spec.choices:
        return f"{shown(value)} must be one of {', '.join(map(str, spec.choices))}{_choice_hint(value, spec)}"
    if not _is_number(value):
        return None
    if spec.minimum is not None and value < spec.minimum:
        return f"{shown(value)} is below the documented minimum {spec.minimum:g}"
    if spec.maximum is not None and value > spec.maximum:
        return f"{shown(value)} is above the documented maximum {spec.maximum:g}"
    return None


def _choice_hint(value: Any, spec: Parameter) -> str:
    """A close choice, and why it is not what the docs' own default says (three `plottype`
    defaults read `column` where their list spells `columns`)."""
    choices = [c for c in spec.choices or () if isinstance(c, str)]
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.75) if isinstance(value, str) else []
    if not close:
        return ""
    if value == spec.default:
        return f" (write {close[0]!r}: the docs' default {value!r} is spelt {close[0]!r} in their own list)"
    return f" (did you mean {close[0]!r}?)"


# CSS-style colours as the docs write them (rgb(), rgba()) and their hex forms; ASCII digits
# and spaces only (Unicode's `\d` takes `٤١` for 41, and int() reads it so)
_RGB = r"\s*(\d{1,3})\s*,\s*(\d{1,3})\s*,\s*(\d{1,3})\s*"
_ALPHA = r"\s*(\d+(?:\.\d*)?|\.\d+)\s*"
_COLOUR = re.compile(
    rf"rgb\({_RGB}\)|rgba\({_RGB},{_ALPHA}\)|#[0-9a-fA-F]{{3}}|#[0-9a-fA-F]{{6}}|#[0-9a-fA-F]{{8}}",
    re.ASCII,
)


def is_colour(value: Any) -> bool:
    """rgb(r,g,b) and rgba(r,g,b,a) with r, g, b in 0..255 and a in 0..1, or #RGB, #RRGGBB,
    #RRGGBBAA: what CHART-IMG's docs write and TradingView reads."""
    match = _COLOUR.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return False
    *channels, alpha = match.groups()  # rgb()'s three, rgba()'s three, its alpha: None when absent
    return all(int(c) <= 255 for c in channels if c is not None) and (alpha is None or float(alpha) <= 1)


def _is_number(value: Any) -> bool:
    """A finite int or float (JSON has no NaN; a bool is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _has_type(value: Any, documented_type: str) -> bool:
    if documented_type == "Integer":  # 20.0 is 20: a console may store a number as a double
        return is_integral(value)
    if documented_type == "Float":
        return _is_number(value)
    if documented_type == "Boolean":
        return isinstance(value, bool)
    if documented_type == "String":
        return isinstance(value, str)
    if documented_type == "Color":
        return is_colour(value)
    if documented_type == "DateTime (ISO8601)":
        return _moment(value) is not None
    if documented_type == "Object":
        return isinstance(value, Mapping)
    return True  # a documented type with no rule of its own (none today)


def _moment(value: Any) -> datetime | None:
    """An ISO 8601 date-time (a date-time without offset read as UTC), else None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
