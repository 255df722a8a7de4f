"""core/chart_img/answers.py: which answers exhaust a key, cool it, refuse it, or say nothing
about it. No unknown answer retires a key (EXHAUSTED) on first sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.chart_img.answers import (
    Disposition,
    accounts_exhausted,
    classify,
    error_message,
    failure_from_response,
    mock_missing,
    not_a_png,
    refused_everywhere,
    says_daily_limit,
    validation_errors,
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


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (408, {"message": "Request Timeout"}),
        (425, {"message": "Too Early"}),
        (500, {"message": "Something Went Wrong"}),
        (502, "<html><body>Bad Gateway</body></html>"),
        (503, None),
        (520, "<html>Web server is returning an unknown error</html>"),  # the CDN's 52x
        (522, "<html>Connection timed out</html>"),
        (524, "<html>A timeout occurred</html>"),
        (529, None),
    ],
)
def test_a_bad_moment_is_tried_again(status: int, body: Any) -> None:
    """5xx (the CDN's 52x timeouts among them), 408 and 425: the next answer may be a chart.
    Each of these ended a chart after one attempt before."""
    assert classify(status, body) is Disposition.RETRY


@pytest.mark.parametrize(
    ("status", "message"), [(400, "Bad Request"), (404, "Not Found"), (422, "Invalid Symbol")]
)
def test_what_the_request_caused_is_final(status: int, message: str) -> None:
    assert classify(status, {"message": message}) is Disposition.FINAL


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


# --- what a failure says (failures[] of the step, read by people and by the manifest) -----------


@pytest.mark.parametrize("body", [None, 42, {}, {"message": "   "}, {"errors": "not a list"}])
def test_an_answer_without_words_has_an_empty_message_and_the_failure_says_so(body: Any) -> None:
    assert error_message(body) == ""
    error = failure_from_response(500, body)
    assert error.details["message"] == "no message in the response body"
    assert error.message == "CHART-IMG answered HTTP 500: no message in the response body"


def test_a_validation_array_is_summarised_param_first() -> None:
    errors = [
        {"msg": "must be at most 800", "param": "width"},
        {"message": "Invalid value", "param": ""},  # an empty param names nothing
        {"msg": "bad", "param": 7},  # nor does a param that is not a string
        "plain text",
    ]
    assert error_message({"errors": errors}) == "width: must be at most 800; Invalid value; bad; plain text"
    assert error_message([{"message": "first", "msg": "second"}]) == "first"  # `message` wins


def test_validation_errors_keep_param_and_msg_bounded_never_the_echoed_value() -> None:
    body = {
        "errors": [
            {"param": "width", "msg": "too wide", "value": 5000},
            {"msg": "no param"},
            {"param": "p" * 150, "msg": "m" * 250},
            {"value": 1},  # neither: not a validation item
            "msg and param in a string",
        ]
    }
    assert validation_errors(body) == [
        {"param": "width", "msg": "too wide"},
        {"param": "", "msg": "no param"},
        {"param": "p" * 100, "msg": "m" * 200},
    ]
    assert validation_errors([{"param": "height"}]) == [{"param": "height", "msg": ""}]  # bare array
    assert validation_errors({"errors": None}) == [] and validation_errors("text") == []


def test_a_failure_names_the_status_and_the_providers_words() -> None:
    quota = failure_from_response(429, {"message": "Too Many Requests"})
    assert quota.message == "CHART-IMG refused the request for quota reasons (HTTP 429: Too Many Requests)"
    key = failure_from_response(401, {"message": "Invalid Request"})
    assert key.message == "CHART-IMG refused the account's API key (HTTP 401: Invalid Request)"
    assert key.details == {"httpStatus": 401, "message": "Invalid Request", "errorKind": "bad_key"}


def test_only_a_403_about_max_usage_is_a_plan_limit() -> None:
    words = {"message": "Exceed Max Usage Resolution Limit (800x600)"}
    named = failure_from_response(403, words, template_id="big_v1")
    assert named.details["errorKind"] == "plan_limit"
    allows = "asks for more than the CHART-IMG plan allows"
    assert named.message == f"template big_v1 {allows}: {words['message']}"
    unnamed = failure_from_response(403, words)
    assert unnamed.message.startswith(f"the template {allows}")
    assert "errorKind" not in failure_from_response(400, words).details
    assert "errorKind" not in failure_from_response(403, {"message": "Layout Forbidden"}).details


def test_a_200_that_is_not_a_png_says_what_came_instead() -> None:
    error = not_a_png(None, 12, "it has no IEND chunk: the image is cut short")
    assert error.code.value == "CHART_API_FAILED"
    assert error.message == (
        "CHART-IMG answered HTTP 200 but the body is not a whole PNG image: "
        "it has no IEND chunk: the image is cut short"
    )
    assert error.details == {"httpStatus": 200, "contentType": "", "bytes": 12, "errorKind": "not_png"}
    assert not_a_png("text/html", 3, "no signature").details["contentType"] == "text/html"


def test_a_missing_fixture_names_the_key_the_directory_and_the_files_expected(tmp_path: Path) -> None:
    error = mock_missing("BINANCE_BTCUSDT__1h__t_v1", tmp_path)
    assert error.code.value == "CHART_API_MOCK_MISSING"
    assert error.details == {
        "fixtureKey": "BINANCE_BTCUSDT__1h__t_v1",
        "fixturesDir": str(tmp_path),
        "expected": ["BINANCE_BTCUSDT__1h__t_v1.png", "BINANCE_BTCUSDT__1h__t_v1__<status>_<REASON>.json"],
    }


def test_every_account_exhausted_is_one_limit_failure_listing_them_sorted() -> None:
    error = accounts_exhausted(["b", "a"])
    assert error.code.value == "CHART_API_LIMIT_EXCEEDED"
    assert error.message == "every CHART-IMG account is at its daily limit; no request was sent"
    assert error.details == {"exhaustedAccounts": ["a", "b"]}


def test_a_request_refused_on_every_key_says_so_with_the_providers_words() -> None:
    key_refused = failure_from_response(401, {"message": "Invalid Request"})
    error = refused_everywhere(key_refused, ["acc1", "acc2"])
    assert error.message == (
        "CHART-IMG refused this request on every account it could go to (HTTP 401: Invalid Request); "
        "the request, not a key, is refused: no key was set aside"
    )
    assert error.details == {
        "httpStatus": 401,
        "message": "Invalid Request",
        "errorKind": "request_refused",
        "refusedBy": ["acc1", "acc2"],
    }
    assert error.code.value == "CHART_API_FAILED"
