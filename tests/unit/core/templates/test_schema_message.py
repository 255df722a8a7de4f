"""core/templates/template_check.schema_message: a JSON Schema error in words that name the rule
and never the value (a file that is not a template may hold a key), judged on errors the real
jsonschema validator raises."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from worker_chart_export.core.templates.template_check import schema_message

KEY = "test-key-" + "0123456789abcdef" * 2


def words(schema: dict[str, Any], instance: Any) -> list[str]:
    return [schema_message(error) for error in Draft202012Validator(schema).iter_errors(instance)]


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        (5, "is a number, not of type 'string'"),
        (2.5, "is a number, not of type 'string'"),
        (True, "is a boolean, not of type 'string'"),
        (None, "is null, not of type 'string'"),
        ([KEY], "is an array, not of type 'string'"),
        ({"apiKey": KEY}, "is an object, not of type 'string'"),
    ],
)
def test_a_wrong_type_is_named_by_its_kind(instance: Any, expected: str) -> None:
    assert words({"type": "string"}, instance) == [expected]


def test_the_rules_words_after_the_value_are_kept_without_the_value() -> None:
    assert words({"pattern": "^[a-z]+$"}, KEY) == ["does not match '^[a-z]+$'"]
    assert words({"enum": ["x", "y"]}, KEY) == ["is not one of ['x', 'y']"]
    assert words({"maxLength": 3}, KEY) == ["is too long"]


def test_words_that_do_not_start_with_the_value_give_the_rules_name() -> None:
    """jsonschema's words for these start elsewhere ("'b' is a dependency of 'a'", "'x' was
    expected"): only the rule is named."""
    assert words({"dependentRequired": {"a": ["b"]}}, {"a": KEY}) == [
        "does not satisfy the schema's 'dependentRequired' rule"
    ]
    assert words({"const": "x"}, KEY) == ["does not satisfy the schema's 'const' rule"]


def test_words_that_would_show_the_value_again_give_the_rules_name() -> None:
    """`1 is not one of [10, 1.5]`: the rest, `is not one of [10, 1.5]`, holds `1` again."""
    assert words({"enum": [10, 1.5]}, 1) == ["does not satisfy the schema's 'enum' rule"]
