"""A small evaluator of the Cloud Logging query language, for the subset deploy/monitoring/ uses,
and the way Cloud Run turns a JSON line on stdout into a LogEntry.

Supported (anything else raises ValueError, so a filter that grows past it fails loudly):
- comparisons `FIELD OP VALUE` with OP one of `=`, `!=`, `:` (has: case-insensitive substring),
  `<`, `<=`, `>`, `>=`; FIELD a dotted path (`jsonPayload.error.code`, `resource.labels.x`);
  VALUE a double-quoted string or a bare word/number;
- `severity` compared by level (DEFAULT < DEBUG < INFO < ... < EMERGENCY), as Cloud Logging does;
- `AND`, `OR`, `NOT`, parentheses; adjacent terms are ANDed, and OR binds tighter than AND, as
  documented for the Logging query language;
- a comparison on a missing field is false (`!=` included);
- label extractors of the form `EXTRACT(path)`.

Structured lines (Cloud Run, as documented for structured logging's special JSON fields): a
JSON object line becomes `jsonPayload`; `severity` moves to LogEntry.severity; `message` stays
in jsonPayload (it is the summary line); `time`/`timestamp`, `logging.googleapis.com/trace`,
`.../spanId`, `.../labels`, `httpRequest` and `.../sourceLocation` move to their LogEntry fields.
The resource (`cloud_run_revision` with its labels) comes from the platform, not from the line.
"""

from __future__ import annotations

import json
import re
from typing import Any

SEVERITIES = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]

_MOVED = {
    "severity": "severity",
    "time": "timestamp",
    "timestamp": "timestamp",
    "httpRequest": "httpRequest",
    "logging.googleapis.com/trace": "trace",
    "logging.googleapis.com/spanId": "spanId",
    "logging.googleapis.com/trace_sampled": "traceSampled",
    "logging.googleapis.com/labels": "labels",
    "logging.googleapis.com/sourceLocation": "sourceLocation",
    "logging.googleapis.com/insertId": "insertId",
    "logging.googleapis.com/operation": "operation",
}


def cloud_run_entry(line: str, service: str = "worker-chart-export") -> dict[str, Any]:
    """The LogEntry Cloud Logging stores for one line the container wrote to stdout."""
    entry: dict[str, Any] = {
        "resource": {
            "type": "cloud_run_revision",
            "labels": {"service_name": service, "revision_name": f"{service}-00001-abc"},
        },
        "logName": "projects/p/logs/run.googleapis.com%2Fstdout",
    }
    try:
        payload = json.loads(line)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        entry["textPayload"] = line
        entry["severity"] = "DEFAULT"
        return entry
    for field, target in _MOVED.items():
        if field in payload:
            entry[target] = payload.pop(field)
    entry.setdefault("severity", "DEFAULT")
    entry["jsonPayload"] = payload
    return entry


_TOKEN = re.compile(
    r"""\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<op><=|>=|!=|=|:|<|>)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<word>[^\s()=!:<>"]+))"""
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ValueError(f"cannot read the filter at: {text[pos:]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match[kind]))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _lookup(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


def _compare(actual: Any, op: str, expected: str, *, is_severity: bool) -> bool:
    if actual is _MISSING or actual is None:
        return False
    if is_severity:
        a, e = SEVERITIES.index(str(actual).upper()), SEVERITIES.index(expected.upper())
    elif isinstance(actual, bool):
        a, e = str(actual).lower(), expected.lower()
    elif isinstance(actual, int | float):
        a, e = actual, float(expected)
    else:
        a, e = str(actual), expected
    if op == ":":
        return str(e).lower() in str(a).lower()
    return {
        "=": a == e,
        "!=": a != e,
        "<": a < e,
        "<=": a <= e,
        ">": a > e,
        ">=": a >= e,
    }[op]


class _Parser:
    def __init__(self, text: str, entry: dict[str, Any]) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.entry = entry

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ValueError("the filter ends too early")
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def conjunction(self) -> bool:  # AND (explicit or implied) of disjunctions
        result = self.disjunction()
        while (token := self.peek()) is not None and token[0] != "rp":
            if token == ("word", "AND"):
                self.take()
            result = self.disjunction() and result
        return result

    def disjunction(self) -> bool:
        result = self.negation()
        while self.peek() == ("word", "OR"):
            self.take()
            result = self.negation() or result
        return result

    def negation(self) -> bool:
        if self.peek() == ("word", "NOT"):
            self.take()
            return not self.primary()
        return self.primary()

    def primary(self) -> bool:
        kind, text = self.take()
        if kind == "lp":
            result = self.conjunction()
            if self.take()[0] != "rp":
                raise ValueError("unbalanced parentheses")
            return result
        if kind != "word":
            raise ValueError(f"expected a field, got {text!r}")
        op_kind, op = self.take()
        if op_kind != "op":
            raise ValueError(f"bare terms are outside the supported subset: {text!r}")
        value_kind, value = self.take()
        if value_kind == "str":
            value = json.loads(value)
        elif value_kind != "word":
            raise ValueError(f"expected a value after {text}{op}")
        return _compare(_lookup(self.entry, text), op, value, is_severity=text == "severity")


def matches(filter_text: str, entry: dict[str, Any]) -> bool:
    parser = _Parser(filter_text, entry)
    result = parser.conjunction()
    if parser.peek() is not None:
        raise ValueError(f"unparsed filter from token {parser.peek()!r}")
    return result


def extract(extractor: str, entry: dict[str, Any]) -> Any:
    match = re.fullmatch(r"EXTRACT\(([\w.]+)\)", extractor.strip())
    if not match:
        raise ValueError(f"unsupported extractor: {extractor!r}")
    value = _lookup(entry, match[1])
    return None if value is _MISSING else value
