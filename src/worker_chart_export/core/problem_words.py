"""A validation problem in our words, not a library's: pydantic says "Input should be
greater than or equal to 1" and "Value error, expected ..."; a user of the CLI reads "must be
at least 1" and "expected ...". Used wherever a pydantic ValidationError becomes a message
(settings.py for the environment, adapters/chart_img/accounts_config.py for the accounts).

The input is one of `ValidationError.errors()`' items, a plain mapping; its `input` (the
value, which may be a key) is never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be less than {}"),
    "string_too_short": ("min_length", "must be at least {} character(s)"),
    "string_too_long": ("max_length", "must be at most {} character(s)"),
    "too_short": ("min_length", "must have at least {} item(s)"),
    "too_long": ("max_length", "must have at most {} item(s)"),
    "string_pattern_mismatch": ("pattern", "must match {}"),
    "enum": ("expected", "must be {}"),
    "literal_error": ("expected", "must be {}"),
}
_FIXED = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
}
_LIBRARY_PREFIXES = ("Value error, ", "Assertion failed, ")
_CAPITALISED_WORD = re.compile(r"[A-Z][a-z]*\b", re.ASCII)


def plain_problem(error: Mapping[str, Any]) -> str:
    """What is wrong with one value, starting lower-case ("must be at least 1")."""
    kind = error.get("type")
    context = error.get("ctx") or {}
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        if key in context:
            return words.format(_shown(context[key]))
    if kind in _FIXED:
        return _FIXED[kind]
    message = str(error.get("msg") or "is not valid")
    for prefix in _LIBRARY_PREFIXES:
        message = message.removeprefix(prefix)
    if message.startswith("Input should be "):
        message = "must be " + message.removeprefix("Input should be ")
    if _CAPITALISED_WORD.match(message):  # a sentence's capital, not a name's (CHART-IMG, KiB)
        message = message[0].lower() + message[1:]
    return message


def _shown(bound: object) -> str:
    """A bound as a person writes it: 0.0 as 0, 2.5 as 2.5, text as it is."""
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)
