"""core/chart_img_answers.py: which answers exhaust a key, cool it, refuse it, or say nothing
about it. No unknown answer retires a key (EXHAUSTED) on first sight."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.chart_img_answers import (
    Disposition,
    classify,
    failure_from_response,
    says_daily_limit,
    wording,
)


@pytest.mark.parametrize(
    "message",
    [
        "Limit Exceeded",
        "limit exceeded",
        "LIMIT EXCEEDED.",
        " Limit Exceeded! ",
        "[Limit Exceeded]",
        "limit-exceeded",
        "Exceed the usage limit",
        "Usage limit exceeded.",
    ],
)
def test_the_daily_limit_wording_exhausts_whatever_its_case_and_punctuation(message: str) -> None:
    assert says_daily_limit(message)
    assert classify(429, {"message": message}) is Disposition.EXHAUSTED


@pytest.mark.parametrize(
    "body",
    [
        {"message": "Too Many Requests"},
        {"message": "too many requests."},
        {},
        "",
        None,
        {"message": ""},
        {"message": "Rate Limit Exceeded"},  # the rate, not the day: a whole-message match only
        {"message": "Limit Exceeded for this second"},
        {"message": "Quota Gone"},
        {"error": "Slow down"},
        "<html><body>429</body></html>",
        [{"msg": "limit", "param": "x"}],
    ],
)
def test_any_other_429_only_cools_the_key(body: Any) -> None:
    assert classify(429, body) is Disposition.RATE_LIMITED


def test_the_quota_wording_under_another_status_cools_without_exhausting() -> None:
    assert classify(403, {"message": "Limit Exceeded"}) is Disposition.RATE_LIMITED
    assert classify(500, {"message": "limit exceeded"}) is Disposition.RATE_LIMITED


@pytest.mark.parametrize(
    ("status", "body"),
    [(401, {"message": "Invalid Request"}), (401, {}), (403, {"message": "Forbidden"}), (403, "forbidden.")],
)
def test_key_refusals(status: int, body: Any) -> None:
    assert classify(status, body) is Disposition.BAD_KEY


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (403, {"message": "Layout Forbidden"}, Disposition.FINAL),
        (403, {"message": "Exceed Max Usage Parameter Limit (3)"}, Disposition.FINAL),
        (403, {"message": "Exceed Max Usage Resolution Limit (800x600)"}, Disposition.FINAL),
        (409, {"message": "Session Disconnected"}, Disposition.FINAL),
        (504, {"message": "External Request Timeout"}, Disposition.RETRY),
        (200, None, Disposition.SUCCESS),
    ],
)
def test_the_documented_answers_about_the_request(status: int, body: Any, expected: Disposition) -> None:
    assert classify(status, body) is expected


@given(
    status=st.integers(400, 599),
    message=st.one_of(st.none(), st.text(max_size=40)),
)
def test_no_answer_but_the_daily_limit_wording_on_a_429_exhausts(status: int, message: str | None) -> None:
    body = {} if message is None else {"message": message}
    exhausts = classify(status, body) is Disposition.EXHAUSTED
    assert exhausts == (status == 429 and says_daily_limit(message or ""))


def test_wording_ignores_case_spacing_and_punctuation() -> None:
    assert wording("  Too   Many-Requests!! ") == "too many requests"


@pytest.mark.parametrize(
    ("status", "message", "limit"),
    [
        (429, "Limit Exceeded", "daily"),
        (429, "Too Many Requests", "rate"),
        (429, "", "unrecognised"),
        (429, "Quota Gone", "unrecognised"),
    ],
)
def test_a_quota_failure_says_which_limit(status: int, message: str, limit: str) -> None:
    error = failure_from_response(status, {"message": message} if message else {})
    assert error.code.value == "CHART_API_LIMIT_EXCEEDED"
    assert error.details["limit"] == limit
