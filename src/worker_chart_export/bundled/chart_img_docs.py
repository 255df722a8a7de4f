"""CHART-IMG's documented lists for Snapshot v2 Advanced Chart and Shared Layout, as frozen
values read once per process from contracts/chart-img/ (package data; what each file holds,
where it came from and how to refresh it: contracts/chart-img/README.md).

Pure reads: no network, no clock, nothing but the standard library. Each function parses its
file on first use and keeps the result; every value returned is read-only (mappings refuse
writes, lists are tuples). The worker's no-op path never imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from worker_chart_export.bundled import chart_img_docs_dir

STUDIES = "studies.json"
DRAWINGS = "drawings.json"
TIMEZONES = "timezones.json"
INTERVALS = "intervals.json"
REQUEST_BOUNDS = "request_bounds.json"
SYMBOLS = "symbols.json"
ERRORS = "errors.json"
LAYOUT_BOUNDS = "layout_bounds.json"
FILES = (STUDIES, DRAWINGS, TIMEZONES, INTERVALS, REQUEST_BOUNDS, SYMBOLS, ERRORS, LAYOUT_BOUNDS)
SCHEMA = "chart-img-docs.schema.json"


def frozen(value: Any) -> Any:
    """JSON as read-only values: objects become mappings that refuse writes, arrays tuples."""
    if isinstance(value, dict):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(frozen(item) for item in value)
    return value


@cache
def document(name: str) -> Mapping[str, Any]:
    """One file of contracts/chart-img/ (one of FILES), parsed once per process, frozen."""
    if name not in FILES:
        raise ValueError(f"{name!r} is not one of CHART-IMG's documented lists ({', '.join(FILES)})")
    document: Mapping[str, Any] = frozen(
        json.loads((chart_img_docs_dir() / name).read_text(encoding="utf-8"))
    )
    return document


# --- parameters, studies, drawings ---------------------------------------------------------


@dataclass(frozen=True)
class Parameter:
    """One documented parameter; None where the docs give no default, bound or choice."""

    name: str
    type: str  # as documented: Integer, Float, String, Boolean, Color, DateTime (ISO8601), Object...
    default: Any = None
    required: bool | None = None  # documented for drawing inputs and request fields only
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    description: str | None = None
    # an Object's own keys (Fib Retracement's levels)
    properties: Mapping[str, Parameter] = field(default_factory=lambda: MappingProxyType({}))


def _parameter(name: str, spec: Mapping[str, Any]) -> Parameter:
    return Parameter(
        name=name,
        type=spec["type"],
        default=spec.get("default"),
        required=spec.get("required"),
        minimum=spec.get("min"),
        maximum=spec.get("max"),
        choices=spec.get("enum"),
        description=spec.get("description"),
        properties=parameters(spec.get("properties", {})),
    )


def parameters(specs: Mapping[str, Any]) -> Mapping[str, Parameter]:
    return MappingProxyType({name: _parameter(name, spec) for name, spec in specs.items()})


@dataclass(frozen=True)
class DocumentedItem:
    """A study or a drawing as its section documents it, under its request `name`."""

    name: str
    input: Mapping[str, Parameter]  # empty: the section documents no input
    override: Mapping[str, Parameter]
    example: Mapping[str, Any]  # the studies[]/drawings[] entry of the section's request example
    example_only_keys: Mapping[str, tuple[str, ...]]  # keys the example sends, the tables lack
    z_order: Parameter | None = None  # drawings only


def _items(name: str, key: str) -> Mapping[str, DocumentedItem]:
    found = {}
    for entry in document(name)[key]:
        found[entry["name"]] = DocumentedItem(
            name=entry["name"],
            input=parameters(entry["input"]),
            override=parameters(entry["override"]),
            example=entry["example"],
            example_only_keys=entry.get("exampleOnlyKeys", MappingProxyType({})),
            z_order=_parameter("zOrder", entry["zOrder"]) if "zOrder" in entry else None,
        )
    return MappingProxyType(found)


@cache
def studies() -> Mapping[str, DocumentedItem]:
    """Every documented study by its `studies[].name`, in the docs' order."""
    return _items(STUDIES, "studies")


@cache
def study_input_keys() -> Mapping[str, frozenset[str]]:
    """Study name -> its documented `input` keys (empty when it documents none)."""
    return MappingProxyType({name: frozenset(study.input) for name, study in studies().items()})


@cache
def drawings() -> Mapping[str, DocumentedItem]:
    """Every documented drawing by its `drawings[].name`, in the docs' order."""
    return _items(DRAWINGS, "drawings")


# --- timezones, intervals ------------------------------------------------------------------


@cache
def timezones() -> frozenset[str]:
    """Snapshot v2's Supported Timezone table, and its default Etc/UTC, which the table omits
    but CHART-IMG itself uses for a body without a timezone."""
    data = document(TIMEZONES)
    return frozenset({data["default"], *(zone["timezone"] for zone in data["timezones"])})


@dataclass(frozen=True)
class Intervals:
    values: tuple[str, ...]  # shortest first
    default: str  # what CHART-IMG uses when a body has no interval
    exchange_dependent: bool  # an exchange may still refuse a listed interval
    changelog_only: frozenset[str]  # announced in Recent Changes, missing from the table


@cache
def intervals() -> Intervals:
    data = document(INTERVALS)
    entries = data["intervals"]
    return Intervals(
        values=tuple(e["interval"] for e in entries),
        default=data["default"],
        exchange_dependent=data["exchangeDependent"],
        changelog_only=frozenset(e["interval"] for e in entries if e["documentedIn"].startswith("changelog")),
    )


# --- the request's bounds ------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentedPlan:
    """A plan's row in the Request Limit tables; ENTERPRISE's open floors ('35+') stay text."""

    name: str
    max_width: int
    max_height: int
    max_studies_plus_drawings: int
    watermark: bool  # CHART-IMG's own watermark on every image
    custom_watermark: bool  # may send watermark* fields
    req_per_second: int | str
    burst: int | str
    daily_max: int | str


@dataclass(frozen=True)
class RequestBounds:
    body: Mapping[str, Parameter]  # symbol, interval, width, ..., watermarkOpacity
    range_presets: tuple[str, ...]
    range_object: Mapping[str, Parameter]  # from, to
    override: Mapping[str, Parameter]
    price_range: Mapping[str, Parameter]  # override.priceRange
    style_override: Mapping[str, Mapping[str, Parameter]]  # override.style keys by body.style
    study_fields: Mapping[str, Parameter]  # the keys of a studies[] entry
    drawing_fields: Mapping[str, Parameter]  # the keys of a drawings[] entry
    plans: Mapping[str, DocumentedPlan]
    watermark_fields: tuple[str, ...]
    custom_watermark_plans: frozenset[str]


def _plan(name: str, row: Mapping[str, Any]) -> DocumentedPlan:
    return DocumentedPlan(
        name=name,
        max_width=row["maxWidth"],
        max_height=row["maxHeight"],
        max_studies_plus_drawings=row["maxStudiesPlusDrawings"],
        watermark=row["watermark"],
        custom_watermark=row["customWatermark"],
        req_per_second=row["reqPerSecond"],
        burst=row["burst"],
        daily_max=row["dailyMax"],
    )


@cache
def request_bounds() -> RequestBounds:
    data = document(REQUEST_BOUNDS)
    styles = data["override.style"]
    return RequestBounds(
        body=parameters(data["body"]),
        range_presets=data["range"]["presets"],
        range_object=parameters(data["range"]["object"]),
        override=parameters(data["override"]),
        price_range=parameters(data["override.priceRange"]),
        style_override=MappingProxyType({style: parameters(s["keys"]) for style, s in styles.items()}),
        study_fields=parameters(data["studies[]"]),
        drawing_fields=parameters(data["drawings[]"]),
        plans=MappingProxyType({name: _plan(name, row) for name, row in data["plans"].items()}),
        watermark_fields=data["watermark"]["fields"],
        custom_watermark_plans=frozenset(data["watermark"]["customWatermarkPlans"]),
    )


# --- symbols, errors, source ---------------------------------------------------------------


@dataclass(frozen=True)
class SymbolDocs:
    """What the docs show about symbols: examples and one formula, no written grammar."""

    default: str
    examples: tuple[str, ...]  # the Example column of every TradingView Symbols table
    exchanges: frozenset[str]  # the EXCHANGE prefixes of those examples
    continuous_futures_examples: tuple[str, ...]  # ending in '1!'
    perpetual_examples: tuple[str, ...]  # ending in '.P'
    formula_example: str
    formula_since: str
    formula_operators_in_example: tuple[str, ...]


@cache
def symbols() -> SymbolDocs:
    data = document(SYMBOLS)
    rules = data["rules"]
    examples = tuple(row["example"] for row in data["exchanges"])
    return SymbolDocs(
        default=data["default"],
        examples=examples,
        exchanges=frozenset(example.partition(":")[0] for example in examples),
        continuous_futures_examples=rules["continuousFutures"]["examples"],
        perpetual_examples=rules["perpetuals"]["examples"],
        formula_example=rules["formula"]["example"],
        formula_since=rules["formula"]["since"],
        formula_operators_in_example=rules["formula"]["operatorsInTheExample"],
    )


@dataclass(frozen=True)
class ErrorDocs:
    """Errors, API v2 / v3: example bodies per status, and the status table."""

    examples: Mapping[int, tuple[Any, ...]]
    status_types: Mapping[int, str]  # status -> the table's Type, e.g. 400 -> "Bad Request"

    def messages(self, status: int) -> frozenset[str]:
        """The documented `{"message": ...}` wordings for `status` (empty if none)."""
        bodies = self.examples.get(status, ())
        return frozenset(b["message"] for b in bodies if isinstance(b, Mapping) and "message" in b)


@cache
def errors() -> ErrorDocs:
    data = document(ERRORS)
    return ErrorDocs(
        examples=MappingProxyType({int(status): bodies for status, bodies in data["examples"].items()}),
        status_types=MappingProxyType(
            {int(status): row["type"] for status, row in data["statusTable"].items()}
        ),
    )


@dataclass(frozen=True)
class Source:
    url: str
    repository: str
    path: str
    commit: str
    documented_as_of: str  # the newest Recent Changes entry of the copy
    retrieved: str


@cache
def source() -> Source:
    """Where the lists came from (every file names the same copy)."""
    data = document(STUDIES)
    copy = data["source"]["publicCopy"]
    return Source(
        url=data["source"]["url"],
        repository=copy["repository"],
        path=copy["path"],
        commit=copy["commit"],
        documented_as_of=data["documentedAsOf"],
        retrieved=data["retrieved"],
    )
