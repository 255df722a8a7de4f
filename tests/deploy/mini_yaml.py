"""Reads the block-style YAML subset deploy/cloudrun.service.yaml is written in, so the tests need
no YAML library: nested mappings, lists of mappings (`- key: value`), plain or double-quoted
scalars, full-line and trailing `#` comments. Anything else raises ValueError (better than a
silent misread)."""

from __future__ import annotations

import json
import re
from typing import Any

_KEY = re.compile(r"^(?P<key>[^\s:#][^:]*?):(?:\s+(?P<value>.*))?$")


def _scalar(text: str) -> str:
    text = re.sub(r"\s+#.*$", "", text).strip()
    if text.startswith('"'):
        return str(json.loads(text))
    if text[:1] in ("'", "{", "[", "|", ">", "&", "*", "!"):
        raise ValueError(f"unsupported YAML scalar: {text!r}")
    return text


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError("tabs in indentation")
        out.append((len(raw) - len(raw.lstrip(" ")), stripped))
    return out


def _block(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[Any, int]:
    if lines[start][1].startswith("- "):
        items: list[Any] = []
        i = start
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            # "- key: v" opens a mapping whose keys sit two columns further in.
            inner = [*lines[:i], (indent + 2, lines[i][1][2:]), *lines[i + 1 :]]
            item, i = _block(inner, i, indent + 2)
            items.append(item)
        return items, i
    mapping: dict[str, Any] = {}
    i = start
    while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
        match = _KEY.match(lines[i][1])
        if not match:
            raise ValueError(f"not a mapping entry: {lines[i][1]!r}")
        key, value = match["key"].strip(), match["value"]
        if value is not None and not value.startswith("#"):
            mapping[key] = _scalar(value)
            i += 1
        elif i + 1 < len(lines) and lines[i + 1][0] > indent:
            mapping[key], i = _block(lines, i + 1, lines[i + 1][0])
        elif i + 1 < len(lines) and lines[i + 1][0] == indent and lines[i + 1][1].startswith("- "):
            mapping[key], i = _block(lines, i + 1, indent)
        else:
            mapping[key] = None
            i += 1
    return mapping, i


def load(text: str) -> Any:
    lines = _lines(text)
    value, end = _block(lines, 0, lines[0][0])
    if end != len(lines):
        raise ValueError(f"unparsed YAML from: {lines[end][1]!r}")
    return value
