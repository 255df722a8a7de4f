"""core.problem_words: pydantic's wording never reaches a user; its real errors, translated."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worker_chart_export.core.problem_words import plain_problem


class Mode(StrEnum):
    REAL = "real"
    MOCK = "mock"


class Model(BaseModel):
    """One field per kind of problem, as Settings and the accounts declare them."""

    model_config = ConfigDict(extra="forbid")

    at_least: int = Field(1, ge=1)
    more_than: float = Field(1.0, gt=0)
    at_most: int = Field(1, le=64)
    less_than: float = Field(1.0, lt=2.5)
    whole: int = 1
    number: float = 1.0
    flag: bool = True
    text: str = "x"
    short: str = Field("xx", min_length=2, max_length=3)
    pattern: str = Field("a", pattern=r"^[a-z]+$")
    mode: Mode = Mode.REAL
    literal: Literal["a", "b"] = "a"
    needed: int
    checked: str = "fine"

    @field_validator("checked")
    @classmethod
    def _check(cls, value: str) -> str:
        if value != "fine":
            raise ValueError("Expected 'fine', got something else")
        return value


def problem_of(**values: Any) -> str:
    values.setdefault("needed", 1)
    with pytest.raises(ValidationError) as caught:
        Model(**values)
    [error] = caught.value.errors()
    return plain_problem(error)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"at_least": 0}, "must be at least 1"),
        ({"more_than": 0}, "must be more than 0"),
        ({"at_most": 65}, "must be at most 64"),
        ({"less_than": 3}, "must be less than 2.5"),
        ({"whole": "x"}, "must be a whole number"),
        ({"whole": 1.5}, "must be a whole number"),
        ({"number": "x"}, "must be a number"),
        ({"flag": "maybe"}, "must be true or false"),
        ({"text": 3}, "must be a string"),
        ({"short": "x"}, "must be at least 2 character(s)"),
        ({"short": "xxxx"}, "must be at most 3 character(s)"),
        ({"pattern": "A"}, "must match ^[a-z]+$"),
        ({"mode": "fake"}, "must be 'real' or 'mock'"),
        ({"literal": "c"}, "must be 'a' or 'b'"),
        ({"unknown": 1}, "is not a known field"),
        ({"checked": "bad"}, "expected 'fine', got something else"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_each_problem_in_our_words(values: dict[str, Any], words: str) -> None:
    text = problem_of(**values)
    assert text == words
    assert "Input should" not in text and "Value error" not in text


def test_a_missing_value_is_required() -> None:
    with pytest.raises(ValidationError) as caught:
        Model()  # type: ignore[call-arg]
    [error] = caught.value.errors()
    assert plain_problem(error) == "is required"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        # a kind not in the tables: pydantic's message, its "Input should be" made ours
        ({"type": "list_type", "msg": "Input should be a valid list"}, "must be a valid list"),
        ({"type": "assertion_error", "msg": "Assertion failed, no good"}, "no good"),
        # a name keeps its capitals; a sentence's first word does not
        ({"type": "value_error", "msg": "Value error, CHART-IMG plan unknown"}, "CHART-IMG plan unknown"),
        ({"type": "value_error", "msg": "Value error, Unknown plan"}, "unknown plan"),
        ({"type": "value_error", "msg": "Value error, A plan is needed"}, "a plan is needed"),
        ({"type": "value_error", "msg": "Value error, KiB are not bytes"}, "KiB are not bytes"),
        ({"type": "value_error", "msg": "Value error, GCS bucket unknown"}, "GCS bucket unknown"),
        ({"msg": "Input should be a valid list"}, "must be a valid list"),  # no type at all
        # a bound kind whose context is missing falls back to the message
        ({"type": "greater_than", "msg": "Input should be greater than 2"}, "must be greater than 2"),
        ({"type": "greater_than_equal", "ctx": {"ge": 2.0}}, "must be at least 2"),
        ({}, "is not valid"),
    ],
)
def test_what_the_tables_do_not_name(error: dict[str, Any], words: str) -> None:
    assert plain_problem(error) == words


def test_the_input_is_never_read() -> None:
    error = {"type": "string_type", "msg": "Input should be a valid string", "input": "sk-secret-key"}
    assert "sk-secret" not in plain_problem(error)
