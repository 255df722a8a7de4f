#!/usr/bin/env python3
"""Extract CHART-IMG's documented lists for Snapshot v2 Advanced Chart and Shared Layout into
contracts/chart-img/.

Input: a plain-text copy of doc.chart-img.com, e.g. the public one in the repository
johnpaul-aquino/charttalk, path `.docs/chart-img-raw-documentation` (see
contracts/chart-img/README.md, "Refresh"). Output: studies.json, drawings.json,
timezones.json, intervals.json, request_bounds.json, symbols.json, errors.json (Advanced
Chart) and layout_bounds.json (Shared Layout), each with its source and dates. Strict: a
line the parser does not expect stops it with the line number, so a changed page is noticed
rather than half read.

    python scripts/extract_chart_img_docs.py DOC.txt --commit SHA --committed-at YYYY-MM-DD
    python scripts/extract_chart_img_docs.py DOC.txt ... --check   # exit 1 if a file differs

Needs only the standard library (it is not part of the package).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "contracts" / "chart-img"
DOCS_URL = "https://doc.chart-img.com/"
COPY_REPOSITORY = "https://github.com/johnpaul-aquino/charttalk"
COPY_PATH = ".docs/chart-img-raw-documentation"
ENDPOINT = "POST /v2/tradingview/advanced-chart"
LAYOUT_ENDPOINT = "POST /v2/tradingview/layout-chart/<LAYOUT_ID>"
END_OF_TABLE = "If default values are the same, there is no need to include them in the request."
# Scraping artefacts, mended on purpose (each is listed in the output's `notes`).
TYPE_FIXES = {"Color2196F3": "Color"}
# A row listed twice where its pair is meant: (section, key) -> the key the example sends.
DUPLICATE_ROW_FIXES = {("Williams %R", "UpperLimit.visible"): "LowerLimit.visible"}
MIN_MAX = re.compile(r"\((?:Min: (?P<min>-?[\d.]+))?(?:, )?(?:Max: (?P<max>-?[\d.]+))?\)")
ENUM = re.compile(r"\[([^\]]+)\]")
BOUNDS_ONLY = re.compile(r"\([^)]*\)|\[[^\]]*\]")  # a description that only repeats min/max or enum
Json = dict[str, Any]


class DocError(ValueError):
    """The page does not look the way this parser expects; names the line."""


@dataclass(frozen=True)
class Doc:
    lines: list[str]

    def index(self, text: str, start: int = 0) -> int:
        for number in range(start, len(self.lines)):
            if self.lines[number].strip() == text:
                return number
        raise DocError(f"line {text!r} not found after line {start + 1}")

    def cells(self, number: int) -> list[str]:
        return self.lines[number].split("\t")


# --- values in tables ----------------------------------------------------------------------


def typed(kind: str, text: str) -> Any:
    """A documented default as a JSON value of its type; None for '-' or a placeholder."""
    if text in ("-", "") or text.startswith("{"):
        return None
    if kind == "Integer":
        return int(text)
    if kind == "Float":
        number = float(text)
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "Boolean":
        return {"true": True, "false": False}[text]
    return text


def number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def parameter(header: list[str], cells: list[str], line: int) -> tuple[str, Json]:
    """One row of a `Parameter  Type  [Required]  [Default]  Description` table."""
    if len(cells) != len(header):
        raise DocError(f"line {line}: {len(cells)} cells under a {len(header)}-column header")
    row = dict(zip(header, cells, strict=True))
    kind = TYPE_FIXES.get(row["Type"], row["Type"])
    spec: Json = {"type": kind}
    if "Required" in row:
        spec["required"] = {"Yes": True, "No": False}[row["Required"]]
    if "Default" in row:
        default = typed(kind, row["Default"])
        if default is not None:
            spec["default"] = default
        elif row["Default"] != "-":
            spec["defaultText"] = row["Default"]
    description = row["Description"]
    bounds = MIN_MAX.search(description)
    if bounds and bounds["min"] is not None:
        spec["min"] = number(bounds["min"])
    if bounds and bounds["max"] is not None:
        spec["max"] = number(bounds["max"])
    options = ENUM.search(description)
    if options:
        spec["enum"] = [typed(kind, o.strip()) for o in options[1].split(",")]
    if description not in ("-", "■") and not BOUNDS_ONLY.fullmatch(description):
        spec["description"] = description
    return row["Parameter"], spec


def table(doc: Doc, start: int, stop: int, section: str = "") -> tuple[Json, int]:
    """The rows of the table whose header is at `start`, and the line after it."""
    header = doc.cells(start)
    if header[0] != "Parameter" or "Type" not in header:
        raise DocError(f"line {start + 1}: expected a table header, got {doc.lines[start]!r}")
    rows: Json = {}
    number = start + 1
    while number < stop and len(doc.cells(number)) > 1:
        name, spec = parameter(header, doc.cells(number), number + 1)
        if name in rows:
            name = DUPLICATE_ROW_FIXES.get((section, name), "")
            if not name or name in rows:
                raise DocError(f"line {number + 1}: {section}: {doc.cells(number)[0]} listed twice")
        rows[name] = spec
        number += 1
    return rows, number


def next_header(doc: Doc, start: int, first: str = "Parameter") -> int:
    """The first table header (a line of tab-separated titles starting with `first`) after start."""
    for number in range(start + 1, len(doc.lines)):
        if doc.lines[number].startswith(first + "\t"):
            return number
    raise DocError(f"no table after line {start + 1}")


def example(doc: Doc, start: int) -> tuple[Json, int]:
    """The JSON request example that starts at or after `start`, and the line after it."""
    first = start
    while not doc.lines[first].startswith("{"):
        first += 1
    for last in range(first, len(doc.lines)):
        if doc.lines[last] == "}":
            return json.loads("\n".join(doc.lines[first : last + 1])), last + 1
    raise DocError(f"line {first + 1}: request example never closes")


# --- sections: studies, drawings, chart styles ---------------------------------------------


def headings(doc: Doc, start: int, stop: int) -> list[int]:
    """Lines of the subsection titles between start and stop: a title, a blank, an example."""
    return [
        n
        for n in range(start, stop - 2)
        if doc.lines[n].strip() and not doc.lines[n + 1] and doc.lines[n + 2].startswith("Request Examp")
    ]


def subsections(doc: Doc, start: int, stop: int) -> Iterator[tuple[str, int, int]]:
    titles = headings(doc, start, stop)
    for position, title in enumerate(titles):
        end = titles[position + 1] if position + 1 < len(titles) else stop
        yield doc.lines[title].strip(), title, end


def tables_after(doc: Doc, start: int, stop: int, section: str) -> dict[str, Json]:
    """Every `Parameter <name>` table between start and stop, by name; nothing else allowed."""
    tables: dict[str, Json] = {}
    number = start
    while number < stop:
        line = doc.lines[number]
        if line.startswith("Parameter ") and "\t" not in line:
            name = line.removeprefix("Parameter ").strip()
            tables[name], number = table(doc, number + 1, stop, section)
        elif line.strip() in ("", END_OF_TABLE):
            number += 1
        else:
            raise DocError(f"line {number + 1}: unexpected {line!r}")
    return tables


def item(doc: Doc, title: str, start: int, stop: int, kind: str) -> Json:
    """One study or drawing: its request name, documented input/override keys, example."""
    body, after = example(doc, start)
    shown = [entry for entry in body.get(kind, []) if entry.get("name") == title]
    if not shown:
        raise DocError(f"line {start + 1}: the example of {title!r} does not use that name in {kind}[]")
    tables = tables_after(doc, after, stop, title)
    entry: Json = {"name": title, "input": tables.pop("input", {}), "override": tables.pop("override", {})}
    levels = {name: rows for name, rows in tables.items() if re.fullmatch(r"level\d+", name)}
    if levels:  # `level{#}  Object` stands for level1..levelN, each documented below it
        entry["override"].pop("level{#}")
        entry["override"].update(
            {name: {"type": "Object", "properties": rows} for name, rows in levels.items()}
        )
    if "zOrder" in tables:
        entry["zOrder"] = tables.pop("zOrder")["zOrder"]
    leftover = set(tables) - set(levels)
    if leftover:
        raise DocError(f"{title}: unexpected tables {sorted(leftover)}")
    entry["example"] = shown[0]
    extra = example_only_keys(entry)
    if extra:
        entry["exampleOnlyKeys"] = extra
    return entry


def items(doc: Doc, heading: str, next_heading: str, kind: str) -> list[Json]:
    start = doc.index(heading, doc.index("Errors"))  # the section, not the table of contents
    stop = doc.index(next_heading, start)
    return [item(doc, title, first, end, kind) for title, first, end in subsections(doc, start, stop)]


def example_only_keys(entry: Json) -> Json:
    """Keys the request example sends that the tables do not document (kept as a note)."""
    found: Json = {}
    for part in ("input", "override"):
        extra = sorted(set(entry["example"].get(part, {})) - set(entry[part]))
        if extra:
            found[part] = extra
    return found


# --- the Snapshot v2 Advanced Chart section ------------------------------------------------


def advanced_chart_v2(doc: Doc) -> tuple[int, int]:
    """First and last line of Snapshot v2's Advanced Chart (up to its To Storage variant)."""
    start = doc.index("Advanced Chart", doc.index("TradingView Snapshot v2", doc.index("Errors")))
    return start, doc.index("Advanced Chart To Storage", start)


def request_tables(doc: Doc) -> dict[str, Json]:
    """The v2 Advanced Chart request tables: header, body, range, override, studies[], drawings[]."""
    start, stop = advanced_chart_v2(doc)
    tables = {
        "header": table(doc, next_header(doc, doc.index("Request Header", start)), stop)[0],
        "body": table(doc, next_header(doc, doc.index("Request Body (Optional)", start)), stop)[0],
    }
    for name in ("range", "override", "override.priceRange", "studies[]", "drawings[]"):
        tables[name] = table(doc, next_header(doc, doc.index(f"Parameter {name}", start)), stop)[0]
    return tables


def body_optional(doc: Doc) -> str:
    """What the docs say about a request without a body (the line under its heading)."""
    start, _ = advanced_chart_v2(doc)
    return doc.lines[doc.index("Request Body (Optional)", start) + 1].strip()


def timezones(doc: Doc) -> list[Json]:
    start, stop = advanced_chart_v2(doc)
    first = doc.index("Supported Timezone", start) + 1
    if doc.cells(first) != ["Timezone", "Country", "UTC Offset"]:
        raise DocError(f"line {first + 1}: unexpected timezone header {doc.lines[first]!r}")
    zones = []
    for number in range(first + 1, stop):
        cells = doc.cells(number)
        if len(cells) != 3:
            break
        zones.append({"timezone": cells[0], "country": cells[1], "utcOffset": cells[2]})
    return zones


def chart_styles(doc: Doc) -> dict[str, Json]:
    """`override.style` keys per chart style, keyed by the `style` value of the example."""
    start = doc.index("TradingView Chart Styles", doc.index("Errors"))
    stop = doc.index("TradingView Chart Indicators", start)
    styles: dict[str, Json] = {}
    for title, first, end in subsections(doc, start, stop):
        body, after = example(doc, first)
        style = body.get("style", "candle")  # the Candle example leaves the default
        styles[style] = {"title": title, "keys": tables_after(doc, after, end, title)["style"]}
    return styles


def plans(doc: Doc) -> dict[str, Json]:
    """Request Limit: the rate, resolution, storage and parameter tables, per plan."""
    start = doc.index("Request Limit ⚠️", doc.index("Errors"))
    stop = doc.index("TradingView Symbols", start)
    columns = {
        "Rate Limit": ("reqPerSecond", "burst", "dailyMax"),
        "Resolution Limit": ("maxWidth", "maxHeight", "watermark", "customWatermark"),
        "Storage Limit": ("storageExpireDays",),
        "Parameter Limit": ("maxStudiesPlusDrawings",),
    }
    found: dict[str, Json] = {}
    for heading, names in columns.items():
        number = next_header(doc, doc.index(heading, start), first="Plan")
        for row in range(number + 1, stop):
            cells = doc.cells(row)
            if len(cells) != len(names) + 1:
                break
            found.setdefault(cells[0], {}).update(zip(names, map(plan_value, cells[1:]), strict=True))
    return found


def plan_value(text: str) -> Any:
    """'1,000' -> 1000, 'Yes' -> True; '35+' stays text (ENTERPRISE's open-ended floor)."""
    if text in ("Yes", "No"):
        return text == "Yes"
    plain = text.replace(",", "")
    return int(plain) if plain.isdigit() else text


def changelog(doc: Doc) -> list[Json]:
    """`Recent Changes`: one entry per dated heading, newest first."""
    start = doc.index("Recent Changes 🕑", doc.index("Errors"))
    stop = doc.index("Tutorials", start)
    entries: list[Json] = []
    for line in doc.lines[start + 1 : stop]:
        day = changelog_date(line.strip())
        if day is not None:
            entries.append({"date": day, "changes": []})
        elif entries and line.strip():
            entries[-1]["changes"].append(line.strip())
    return entries


def changelog_date(text: str) -> str | None:
    """'Sept 22, 2025' / 'July 8, 2024' / 'Jun 3, 2024' -> ISO date; None for other lines."""
    for pattern in ("%b %d, %Y", "%B %d, %Y"):
        try:
            return dt.datetime.strptime(text.replace("Sept ", "Sep "), pattern).date().isoformat()
        except ValueError:
            continue
    return None


# --- the Snapshot v2 Shared Layout section -------------------------------------------------


def shared_layout(doc: Doc) -> tuple[int, int]:
    """First and last line of Snapshot v2's Shared Layout (up to its To Storage variant)."""
    start = doc.index("Shared Layout", doc.index("TradingView Snapshot v2", doc.index("Errors")))
    return start, doc.index("Shared Layout To Storage", start)


def line_matching(doc: Doc, start: int, stop: int, pattern: str) -> re.Match[str]:
    """The one line between start and stop that `pattern` matches whole; else DocError."""
    found = [m for n in range(start, stop) if (m := re.fullmatch(pattern, doc.lines[n].strip()))]
    if len(found) != 1:
        raise DocError(f"expected one line matching {pattern!r} after line {start + 1}, found {len(found)}")
    return found[0]


def sentence_after(doc: Doc, heading: str, start: int, stop: int) -> str:
    """The line under a table: the first non-table line after the table that follows `heading`."""
    number = next_header(doc, doc.index(heading, start))
    while number < stop and len(doc.cells(number)) > 1:
        number += 1
    text = doc.lines[number].strip()
    if not text:
        raise DocError(f"line {number + 1}: expected the sentence under the {heading} table")
    return text


def layout_tables(doc: Doc) -> dict[str, Json]:
    """The Shared Layout request tables: its URL parameter, headers and body."""
    start, stop = shared_layout(doc)
    body_heading = doc.index("Request Body (Optional)", start)
    body, after = table(doc, next_header(doc, body_heading), stop)
    if doc.lines[after].strip() != END_OF_TABLE:
        raise DocError(f"line {after + 1}: unexpected {doc.lines[after]!r} after the Shared Layout body")
    return {
        "url": table(doc, next_header(doc, doc.index("Request URL", start)), stop)[0],
        "headers": table(doc, next_header(doc, doc.index("Request Header", start)), stop)[0],
        "body": body,
    }


def layout_bounds_file(doc: Doc, origin: Origin) -> Json:
    start, stop = shared_layout(doc)
    tables = layout_tables(doc)
    path = line_matching(doc, start, stop, r"POST (/v2/tradingview/layout-chart/<LAYOUT_ID>)")[1]
    named = line_matching(
        doc, start, stop, r"LAYOUT_ID is (.+)\. For example, (\w+) in the URL is a LAYOUT_ID\."
    )
    curl = line_matching(
        doc, start, stop, r"curl -X POST https://api\.chart-img\.com/v2/tradingview/layout-chart/(\w+) \\"
    )
    timeout = line_matching(doc, start, stop, r"Please set the minimum timeout to (\d+) seconds .*\.")
    shared = line_matching(doc, start, stop, r"The layout must be shared .*\.")
    content = line_matching(doc, start, stop, r"The response content-type will be .*")
    return {
        **origin.header("TradingView Snapshot v2 > Shared Layout", endpoint=LAYOUT_ENDPOINT),
        "path": path,
        "layoutId": {
            "documented": f"LAYOUT_ID is {named[1]}.",
            "examples": [named[2], curl[1]],
        },
        "minimumTimeoutSeconds": int(timeout[1]),
        "timeout": timeout[0],
        "sharing": shared[0],
        "sessions": sentence_after(doc, "Request Header", start, stop),
        "bodyOptional": doc.lines[doc.index("Request Body (Optional)", start) + 1].strip(),
        "response": content[0],
        "url": tables["url"],
        "headers": tables["headers"],
        "body": tables["body"],
        "notes": [
            "LAYOUT_ID: no grammar is written; both examples are 8 ASCII letters and digits.",
            "symbol and interval default to the layout's own ({LAYOUT_SYMBOL}, {LAYOUT_INTERVAL}: kept as "
            "defaultText); the interval list is the Advanced Chart's table (no 2m, added to API v2 by the "
            "changelog of 2025-11-26).",
            "width/height: the body table gives the minimum (400 x 300) and the default (800 x 600); the "
            "maximum is the plan's (request_bounds.json plans.*.maxWidth/maxHeight), as for the Advanced "
            "Chart.",
            "watermark: 'set custom watermark text for ULTRA and ENTERPRISE plans', as for the Advanced "
            "Chart (request_bounds.json watermark).",
            "The body has no timezone, style, theme, studies or drawings: the layout holds them.",
            "Which answer means a session CHART-IMG or TradingView no longer accepts is not said here; "
            "errors.json: 403 'Could not authenticate the API key provided or the sessionId for "
            "TradingView's private layout' (example 'Layout Forbidden'), 409 'Could not process the "
            "request due to a session disconnect' (example 'Session Disconnected').",
        ],
    }


# --- symbols and errors ---------------------------------------------------------------------


def symbol_tables(doc: Doc) -> list[Json]:
    """Every row of the `TradingView Symbols` tables: category, exchange, availability, example."""
    start = doc.index("TradingView Symbols", doc.index("Errors"))
    stop = doc.index("TradingView Snapshot v1", start)
    rows: list[Json] = []
    category, header = "", [""]
    for number in range(start + 1, stop):
        cells = doc.cells(number)
        if doc.lines[number].startswith("Please refer to API v3"):
            category = doc.lines[number - 1].strip()  # the heading above the pointer to v3
        elif cells[0] == "Name" and cells[-1] == "Example":
            header = cells  # a table; a second one may follow under the same heading
        elif len(cells) == len(header) > 1:
            row = dict(zip(header, cells, strict=True))
            availability = row.get("API v2", row.get("API v1/v2"))
            rows.append(
                {"category": category, "exchange": row["Name"], "country": row.get("Country"),
                 "apiV2": availability, "example": row["Example"]}
            )  # fmt: skip
    return rows


def errors(doc: Doc) -> Json:
    """Errors, API v2 / v3: the example bodies per status and the status table."""
    start = doc.index("API v2 / v3", doc.index("Errors", doc.index("Errors") + 1))
    stop = doc.index("CURL", start)
    examples: dict[str, list[Any]] = {}
    status, number = "", start + 1
    while number < stop:
        line = doc.lines[number]
        heading = re.fullmatch(r"Response Example \((\d{3})\)", line.strip())
        if heading:
            status, number = heading[1], number + 1
        elif line.startswith(("{", "[")):
            closing = "}" if line.startswith("{") else "]"
            last = doc.lines.index(closing, number)
            examples.setdefault(status, []).append(json.loads("\n".join(doc.lines[number : last + 1])))
            number = last + 1
        elif line.startswith("Status\tType\tDescription"):
            break
        else:
            number += 1
    statuses = {}
    for row in range(number + 1, stop):
        cells = doc.cells(row)
        if len(cells) == 3:
            statuses[cells[0]] = {"type": cells[1], "description": cells[2]}
    return {"examples": examples, "statusTable": statuses}


# --- the files ------------------------------------------------------------------------------

AVAILABILITY = {"✔️": "realtime", "Delayed": "delayed", "Limited": "limited", "❌": "unavailable"}
LEGEND = {
    "realtime": "✔️ Full & real-time chart is available.",
    "delayed": "Delayed Full chart is available but may be delayed by a few minutes.",
    "limited": "Limited Chart interval availability is limited.",
    "unavailable": "❌ Chart is not available.",
}


@dataclass(frozen=True)
class Origin:
    """Where the text came from: the public copy's commit and date, and when we read it."""

    commit: str
    committed_at: str
    retrieved: str
    sha256: str
    documented_as_of: str

    def header(self, *sections: str, endpoint: str = ENDPOINT) -> Json:
        return {
            "source": {
                "url": DOCS_URL,
                "sections": list(sections),
                "publicCopy": {
                    "repository": COPY_REPOSITORY,
                    "path": COPY_PATH,
                    "commit": self.commit,
                    "committedAt": self.committed_at,
                    "sha256": self.sha256,
                },
            },
            "documentedAsOf": self.documented_as_of,
            "retrieved": self.retrieved,
            "endpoint": endpoint,
        }


STUDY_NOTES = [
    "name: the subsection heading, which is also the studies[].name its request example sends "
    "(checked for every study).",
    "input/override: the documented tables, in their order; {} when the section has no such "
    "table (its example sends none either).",
    "Williams %R lists UpperLimit.visible twice; the second is LowerLimit.visible, as its "
    "example sends (mended here).",
    "True Strength Index: the type 'Color2196F3' is a scraping artefact of 'Color' (mended here).",
    "Chop Zone Plot.plottype, MACD Histogram.plottype and Volume Volume.plottype document the "
    "default 'column', which their own enum spells 'columns' (kept as documented).",
    "The v1 'Supported Studies' table (short codes like RSI:14,close for GET /v1/...) is not "
    "this list and is not used.",
]
DRAWING_NOTES = [
    "input keys carry `required` as documented (CHART-IMG requires the input object itself).",
    "Fib Retracement documents `level{#}` (Object); it is expanded to level1..level11, "
    "each with its documented keys and defaults.",
    "Fib Retracement's example sends override `extendLines`, its table documents `extendLine`: "
    "the table is kept, the example's key is listed under exampleOnlyKeys.",
]


def items_file(doc: Doc, origin: Origin, heading: str, stop: str, kind: str, notes: list[str]) -> Json:
    """studies.json or drawings.json: every subsection of a section, as items of `kind`."""
    found = items(doc, heading, stop, kind)
    return {**origin.header(heading), "count": len(found), "notes": notes, kind: found}


def studies_file(doc: Doc, origin: Origin) -> Json:
    return items_file(
        doc, origin, "TradingView Chart Indicators", "TradingView Chart Drawings", "studies", STUDY_NOTES
    )


def drawings_file(doc: Doc, origin: Origin) -> Json:
    return items_file(
        doc, origin, "TradingView Chart Drawings", "TradingView Snapshot v3", "drawings", DRAWING_NOTES
    )


def timezones_file(doc: Doc, origin: Origin) -> Json:
    zones = timezones(doc)
    return {
        **origin.header("TradingView Snapshot v2 > Advanced Chart > Supported Timezone"),
        "count": len(zones),
        "default": request_tables(doc)["body"]["timezone"]["default"],
        "notes": [
            "timezones: the v2 table, as documented (US/Mountain is listed at UTC -06:00).",
            "The table does not list its own default Etc/UTC (the v1 table does); CHART-IMG uses the "
            "default when a body has none, so a reader should accept it as well.",
            "The v1 table differs (e.g. no Asia/Karachi) and is not used.",
        ],
        "timezones": zones,
    }


UNIT_MINUTES = {"m": 1, "h": 60, "D": 1440, "W": 10080, "M": 43200, "Y": 525600}


def minutes(interval: str) -> int:
    """Nominal length, only to sort: 1M as 30 days, 1Y as 365."""
    return int(interval[:-1]) * UNIT_MINUTES[interval[-1]]


def intervals_file(doc: Doc, origin: Origin) -> Json:
    spec = request_tables(doc)["body"]["interval"]
    tabled = list(spec["enum"])
    added = changelog_intervals(doc)
    entries = [{"interval": i, "documentedIn": "parameter table"} for i in tabled]
    entries += [
        {"interval": i, "documentedIn": f"changelog {day} only"}
        for i, day in added.items()
        if i not in tabled
    ]
    entries.sort(key=lambda e: minutes(e["interval"]))
    return {
        **origin.header("TradingView Snapshot v2 > Advanced Chart > Request Body", "Recent Changes"),
        "count": len(entries),
        "default": spec["default"],
        "exchangeDependent": "exchange dependent" in spec["description"],
        "intervals": entries,
        "notes": [
            "The parameter table lists 21 values; the changelog entry of 2025-11-26 adds 2m, 8h, 2D "
            "and 3D, and the table lists all but 2m. 2m is kept (documentedIn says so).",
            "The docs mark the list 'exchange dependent': an exchange may refuse a listed interval.",
        ],
    }


def changelog_intervals(doc: Doc) -> dict[str, str]:
    """Intervals a changelog entry says were added to API v2, with the entry's date."""
    found: dict[str, str] = {}
    for entry in changelog(doc):
        for change in entry["changes"]:
            named = re.fullmatch(r"Added API v2 intervals (.+) support\.", change)
            if named:
                for interval in re.split(r",\s*(?:and\s+)?|\s+and\s+", named[1]):
                    found.setdefault(interval.strip(), entry["date"])
    return found


def request_bounds_file(doc: Doc, origin: Origin) -> Json:
    tables = request_tables(doc)
    plan_table = plans(doc)
    return {
        **origin.header(
            "Request Limit",
            "TradingView Snapshot v2 > Advanced Chart",
            "TradingView Chart Styles",
        ),
        "bodyOptional": body_optional(doc),
        "headers": tables["header"],
        "body": tables["body"],
        "range": {
            "presets": tables["body"]["range"]["enum"],
            "object": tables["range"],
            "note": "Overrides the chart range, which is currently limited to approximately 1,000 interval "
            "bars. Using shiftLeft, shiftRight, or some indicators may adjust the range as well.",
        },
        "override": tables["override"],
        "override.priceRange": tables["override.priceRange"],
        "override.style": chart_styles(doc),
        "studies[]": tables["studies[]"],
        "drawings[]": tables["drawings[]"],
        "plans": plan_table,
        "watermark": {
            # only the fields the docs reserve for those plans: a refusal the docs do not
            # state would cost a feature, which is worse than a unit (watermarkSize)
            "fields": [name for name in ("watermark", "watermarkOpacity") if name in tables["body"]],
            "customWatermarkPlans": [name for name, plan in plan_table.items() if plan["customWatermark"]],
            "note": "`watermark` is documented as 'custom watermark text for ULTRA and ENTERPRISE plans' "
            "and the changelog (2024-06-25) adds custom watermark opacity for ULTRA and ENTERPRISE; "
            "watermarkSize has no plan of its own documented, so it is not among the fields those plans "
            "alone may send. BASIC images always carry CHART-IMG's watermark (Resolution Limit table, "
            "column Watermark).",
        },
        "notes": [
            "width/height: the body table gives the minimum (400 x 300) and the default (800 x 600); "
            "the maximum is the plan's (plans.*.maxWidth/maxHeight).",
            "ENTERPRISE's rate, burst and daily maximum are documented as floors ('35+', '50+', "
            "'5,000+') and kept as text.",
            "range: a preset string, or an object whose from and to are both required.",
        ],
    }


FORMULA_EXAMPLE = "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10"


def symbols_file(doc: Doc, origin: Origin) -> Json:
    rows = symbol_tables(doc)
    for row in rows:
        row["apiV2"] = AVAILABILITY[row["apiV2"]]
    examples = [row["example"] for row in rows]
    formula = [
        (entry["date"], change)
        for entry in changelog(doc)
        for change in entry["changes"]
        if FORMULA_EXAMPLE in change
    ]
    if len(formula) != 1:
        raise DocError(f"expected one changelog entry with the formula example, found {len(formula)}")
    return {
        **origin.header("TradingView Symbols", "TradingView Snapshot v2 > Advanced Chart", "Recent Changes"),
        "format": "EXCHANGE:SYMBOL",
        "default": request_tables(doc)["body"]["symbol"]["default"],
        "rules": {
            "exchangePrefixed": {
                "documented": "List of supported TradingView exchange symbols. EXCHANGE:SYMBOL",
                "refusal": "422 [{param: symbol, msg: 'must be a valid tradingview EXCHANGE:SYMBOL'}] "
                "or 422 {message: 'Invalid Symbol'} (Errors, API v2)",
            },
            "continuousFutures": {
                "documented": "No rule is written; the Futures tables' examples end in '1!' "
                "(a TradingView continuous contract).",
                "examples": [e for e in examples if e.endswith("!")],
            },
            "perpetuals": {
                "documented": "No rule is written; crypto examples end in '.P'.",
                "examples": [e for e in examples if e.endswith(".P")],
            },
            "formula": {
                "documented": formula[0][1],
                "since": formula[0][0],
                "example": FORMULA_EXAMPLE,
                "operatorsInTheExample": sorted(set(re.findall(r"[-+*/()]", FORMULA_EXAMPLE))),
                "numbersInTheExample": re.findall(r"(?<![A-Z:])\d+(?:\.\d+)?", FORMULA_EXAMPLE),
                "note": "The docs give this one example and no grammar: which operators, spaces or "
                "number forms are allowed is not documented.",
            },
            "charactersInExamples": "".join(sorted(set("".join(examples)))),
            "examplesWithSlash": [e for e in examples if "/" in e],
            "note": "A documented symbol may itself contain '/' (see examplesWithSlash), so '/' alone "
            "does not mark a formula.",
        },
        "availabilityLegend": LEGEND,
        "count": len(rows),
        "exchanges": rows,
    }


def errors_file(doc: Doc, origin: Origin) -> Json:
    found = errors(doc)
    return {
        **origin.header("Errors > API v2 / v3"),
        "contentType": "application/json",
        "examples": found["examples"],
        "statusTable": found["statusTable"],
        "notes": [
            "400 has a row in the status table and no example body.",
            "401 has an example body ({message: 'Invalid Request'}) and no row in the status table.",
            "404 has a row and no API v2 example (API v1's is {message: 'Route not found.'}).",
            "The docs do not say which refused requests count against the daily limit.",
        ],
    }


FILES = {
    "studies.json": studies_file,
    "drawings.json": drawings_file,
    "timezones.json": timezones_file,
    "intervals.json": intervals_file,
    "request_bounds.json": request_bounds_file,
    "symbols.json": symbols_file,
    "errors.json": errors_file,
    "layout_bounds.json": layout_bounds_file,
}


def rendered(value: Any, depth: int = 0) -> str:
    """Indented JSON, with short flat objects and lists of short values on one line: one
    documented parameter a line, so the files stay short and their diffs readable."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, dict) and value and not (is_flat(value) and len(flat) <= 160):
        fields = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {rendered(v, depth + 1)}" for k, v in value.items()
        ]
        flat = "{\n" + ",\n".join(fields) + f"\n{pad}}}"
    elif isinstance(value, list) and not (is_flat(value) and len(flat) <= 160):
        flat = "[\n" + ",\n".join(inner + rendered(v, depth + 1) for v in value) + f"\n{pad}]"
    return flat + ("\n" if depth == 0 else "")


def is_flat(value: dict[str, Any] | list[Any]) -> bool:
    """Holds only plain values, or lists of plain values."""
    values = value.values() if isinstance(value, dict) else value
    return all(not isinstance(v, dict) and not (isinstance(v, list) and not is_flat(v)) for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("doc", type=Path, help="plain-text copy of doc.chart-img.com")
    parser.add_argument("--commit", required=True, help="commit of the public copy")
    parser.add_argument("--committed-at", required=True, help="its date, YYYY-MM-DD")
    parser.add_argument("--retrieved", help="when it was read, YYYY-MM-DD (default: today, or with --check "
                        "the date already in the files)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 when a file would change")
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    doc = Doc(text.split("\n"))
    retrieved = args.retrieved or (
        json.loads((args.out / "studies.json").read_text())["retrieved"]
        if args.check
        else dt.date.today().isoformat()
    )
    origin = Origin(
        args.commit,
        args.committed_at,
        retrieved,
        hashlib.sha256(text.encode()).hexdigest(),
        changelog(doc)[0]["date"],
    )
    stale = []
    for name, build in FILES.items():
        content = rendered(build(doc, origin))
        target = args.out / name
        if args.check:
            if not target.exists() or target.read_text(encoding="utf-8") != content:
                stale.append(name)
        else:
            target.write_text(content, encoding="utf-8")
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
