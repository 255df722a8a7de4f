from __future__ import annotations

import pytest

from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.step.success import insufficient_images_error, step_status
from worker_chart_export.core.templates.chart_request import build_request_body, resolve_chart_img_symbol
from worker_chart_export.core.types import StepStatus


@pytest.mark.parametrize(
    ("items", "min_images", "expected"),
    [(2, 2, "SUCCEEDED"), (1, 2, "FAILED"), (3, 2, "SUCCEEDED"), (0, 0, "SUCCEEDED"), (0, 1, "FAILED")],
)
def test_success_rule_boundaries(items: int, min_images: int, expected: str) -> None:
    assert step_status(items, min_images) is StepStatus(expected)


def test_failed_step_error_names_the_dominant_failure() -> None:
    codes = [
        ErrorCode.CHART_API_FAILED,
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
    ]
    error = insufficient_images_error(0, 2, 3, codes)
    assert error.code is ErrorCode.CHART_API_LIMIT_EXCEEDED
    assert "0 of 3 charts rendered, fewer than minImages=2" in error.message
    assert error.details["failureCodes"] == {"CHART_API_FAILED": 1, "CHART_API_LIMIT_EXCEEDED": 2}


def test_failed_step_error_tie_prefers_actionable_code() -> None:
    error = insufficient_images_error(1, 3, 3, [ErrorCode.CHART_API_MOCK_MISSING, ErrorCode.GCS_WRITE_FAILED])
    assert error.code is ErrorCode.GCS_WRITE_FAILED


def test_request_body_adds_market_parameters_without_mutating_template() -> None:
    template_request = {"theme": "dark", "studies": [{"name": "Volume"}]}
    symbol = resolve_chart_img_symbol("BYBIT:{symbol}.P", "BTCUSDT")
    body = build_request_body(template_request, symbol, "4h", "Etc/UTC")
    assert body == {
        "theme": "dark",
        "studies": [{"name": "Volume"}],
        "timezone": "Etc/UTC",
        "symbol": "BYBIT:BTCUSDT.P",
        "interval": "4h",
    }
    body["studies"].append({"name": "MACD"})
    assert template_request == {"theme": "dark", "studies": [{"name": "Volume"}]}
    assert (
        build_request_body({"timezone": "Europe/Berlin"}, "X:Y", "1h", "Etc/UTC")["timezone"]
        == "Europe/Berlin"
    )


def test_too_few_images_is_the_most_frequent_failure_with_every_count_in_its_details() -> None:
    codes = [ErrorCode.CHART_API_FAILED, ErrorCode.GCS_WRITE_FAILED, ErrorCode.CHART_API_FAILED]
    error = insufficient_images_error(1, 3, 4, codes)
    assert error.to_dict() == {
        "code": "CHART_API_FAILED",
        "message": "1 of 4 charts rendered, fewer than minImages=3 (2 CHART_API_FAILED, 1 GCS_WRITE_FAILED)",
        "details": {
            "itemsCount": 1,
            "minImages": 3,
            "requestedCount": 4,
            "failureCodes": {"CHART_API_FAILED": 2, "GCS_WRITE_FAILED": 1},
        },
    }


def test_without_failures_too_few_images_is_chart_api_failed_and_says_nothing_more() -> None:
    error = insufficient_images_error(0, 1, 0, [])
    assert error.code is ErrorCode.CHART_API_FAILED
    assert error.message == "0 of 0 charts rendered, fewer than minImages=1"
    assert error.details["failureCodes"] == {}


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([ErrorCode.CHART_API_MOCK_MISSING, ErrorCode.GCS_WRITE_FAILED], ErrorCode.GCS_WRITE_FAILED),
        (
            [ErrorCode.CHART_API_FAILED, ErrorCode.CHART_API_LIMIT_EXCEEDED],
            ErrorCode.CHART_API_LIMIT_EXCEEDED,
        ),
        # a kind outside the list loses every tie to one an operator acts on first
        (
            [ErrorCode.WORKER_INTERNAL_ERROR, ErrorCode.CHART_API_MOCK_MISSING],
            ErrorCode.CHART_API_MOCK_MISSING,
        ),
        (
            [ErrorCode.CHART_API_MOCK_MISSING, ErrorCode.WORKER_INTERNAL_ERROR],
            ErrorCode.CHART_API_MOCK_MISSING,
        ),
        # but not a majority
        (
            [ErrorCode.WORKER_INTERNAL_ERROR, ErrorCode.WORKER_INTERNAL_ERROR, ErrorCode.GCS_WRITE_FAILED],
            ErrorCode.WORKER_INTERNAL_ERROR,
        ),
    ],
)
def test_ties_go_to_the_kind_an_operator_must_act_on_first(
    codes: list[ErrorCode], expected: ErrorCode
) -> None:
    assert insufficient_images_error(0, 2, 2, codes).code is expected
