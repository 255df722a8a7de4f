"""core/error_codes.StepError.redacted: an error leaves the process with no form of a key in its
message or its details, and unchanged (the very object) when it holds none."""

from __future__ import annotations

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.redaction import REDACTED, Redaction

KEY = "test-key-" + "0123456789abcdef" * 2
REDACTION = Redaction([KEY])


def test_a_key_in_the_details_only_is_redacted() -> None:
    error = StepError(ErrorCode.CHART_API_FAILED, "HTTP 401 from CHART-IMG", {"body": f"bad key {KEY}"})
    redacted = error.redacted(REDACTION)
    assert redacted.to_dict() == {
        "code": "CHART_API_FAILED",
        "message": "HTTP 401 from CHART-IMG",
        "details": {"body": f"bad key {REDACTED}"},
    }


def test_a_key_in_the_message_is_redacted() -> None:
    error = StepError(ErrorCode.CHART_API_FAILED, f"refused {KEY[:12]}", {"status": 401})
    assert error.redacted(REDACTION).to_dict() == {
        "code": "CHART_API_FAILED",
        "message": f"refused {REDACTED}",
        "details": {"status": 401},
    }


def test_an_error_without_a_key_is_returned_as_it_is() -> None:
    error = StepError(ErrorCode.CHART_API_FAILED, "HTTP 500", {"status": 500, "body": "oops"})
    assert error.redacted(REDACTION) is error
