"""core/step/step_failures.py: each step error execute_step records, as the step and the manifest
carry it (`error{code,message,details}`)."""

from __future__ import annotations

from datetime import UTC, datetime

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.step import step_failures
from worker_chart_export.core.types import StepFinal, StepStatus

CAUSE = OSError("HTTP 503 after 4 attempts")


def test_manifest_write_failed_counts_what_the_manifest_would_have_held() -> None:
    error = step_failures.manifest_write_failed(CAUSE, items_count=3, failures_count=1, min_images=2)
    assert error.to_dict() == {
        "code": "MANIFEST_WRITE_FAILED",
        "message": "manifest could not be written: HTTP 503 after 4 attempts",
        "details": {"itemsCount": 3, "failuresCount": 1, "minImages": 2},
    }


def test_png_write_failed_names_the_object() -> None:
    error = step_failures.png_write_failed(CAUSE, "charts/r/s/x.png")
    assert error.to_dict() == {
        "code": "GCS_WRITE_FAILED",
        "message": "PNG could not be written: HTTP 503 after 4 attempts",
        "details": {"objectPath": "charts/r/s/x.png"},
    }


def test_a_chart_abandoned_at_the_budget_names_the_budget_template_and_fixture_key() -> None:
    error = step_failures.chart_abandoned("price_v1", "BINANCE_BTCUSDT__1h__price_v1", 279.6)
    assert error.to_dict() == {
        "code": "CHART_API_FAILED",
        "message": "the step's time budget (280s) ran out before price_v1 was rendered",
        "details": {"reason": "STEP_BUDGET_EXHAUSTED", "fixtureKey": "BINANCE_BTCUSDT__1h__price_v1"},
    }


def test_a_crash_names_the_exception_and_cuts_its_text() -> None:
    error = step_failures.worker_crashed(KeyError("x" * 1000))
    assert error.code is ErrorCode.WORKER_INTERNAL_ERROR and error.details == {"exception": "KeyError"}
    assert error.message == "the worker failed unexpectedly: KeyError: '" + "x" * 299
    # an exception without text ends at its name, not at a dangling ": "
    bare = step_failures.worker_crashed(KeyboardInterrupt())
    assert bare.message == "the worker failed unexpectedly: KeyboardInterrupt"
    spaced = step_failures.worker_crashed(ValueError(": :"))
    assert spaced.message == "the worker failed unexpectedly: ValueError"


def test_a_refusal_reason_is_the_exception_named_and_cut() -> None:
    assert step_failures.finalize_refusal_reason(ValueError("too big")) == "ValueError: too big"
    assert step_failures.finalize_refusal_reason(ValueError("y" * 400)) == "ValueError: " + "y" * 300


def test_a_result_not_recordable_names_the_status_and_code_it_replaces() -> None:
    at = datetime(2026, 11, 23, tzinfo=UTC)
    failed = StepFinal(StepStatus.FAILED, at, error=StepError(ErrorCode.CHART_API_FAILED, "m"))
    assert step_failures.result_not_recordable(failed, "ValueError: too big").to_dict() == {
        "code": "FIRESTORE_FINALIZE_FAILED",
        "message": "the step's result (FAILED, CHART_API_FAILED) could not be recorded: ValueError: too big",
    }
    succeeded = StepFinal(StepStatus.SUCCEEDED, at)
    assert step_failures.result_not_recordable(succeeded, "r").message == (
        "the step's result (SUCCEEDED) could not be recorded: r"
    )


def test_a_superseded_claim_is_step_lease_expired() -> None:
    error = step_failures.claim_superseded()
    assert error.code is ErrorCode.STEP_LEASE_EXPIRED and error.details == {}
    assert error.message.startswith("the step's lease expired and it was taken back")
    assert error.message.endswith("a newer execution owns the step's outputs")


def test_a_crash_message_keeps_the_last_letter_of_its_cause() -> None:
    assert (
        step_failures.worker_crashed(ValueError("BOX")).message
        == "the worker failed unexpectedly: ValueError: BOX"
    )
