"""The step errors execute_step records, each built by one named function.

Messages are part of the contract's `error.message` (people and tests read them); details
never hold secrets.
"""

from __future__ import annotations

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.types import StepFinal

_CAUSE_CHARS = 300  # an exception's text is cut: the step document must stay small


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:_CAUSE_CHARS]}"


def _transient(exc: Exception) -> bool:
    return bool(getattr(exc, "transient", False))


def manifest_write_failed(
    exc: Exception, *, items_count: int, failures_count: int, min_images: int
) -> StepError:
    """Without a manifest downstream has nothing to read: the step cannot be SUCCEEDED (it
    waits when the store only had a bad moment: the next attempt reuses the PNGs)."""
    return StepError(
        ErrorCode.MANIFEST_WRITE_FAILED,
        f"manifest could not be written: {exc}",
        {"itemsCount": items_count, "failuresCount": failures_count, "minImages": min_images},
        retryable=_transient(exc),
    )


def png_write_failed(exc: Exception, object_path: str) -> StepError:
    return StepError(
        ErrorCode.GCS_WRITE_FAILED,
        f"PNG could not be written: {exc}",
        {"objectPath": object_path},
        retryable=_transient(exc),
    )


def chart_abandoned(chart_template_id: str, fixture_key: str, step_budget_seconds: float) -> StepError:
    """A chart still rendering when the step's budget ran out: time comes back with the step's
    next attempt."""
    return StepError(
        ErrorCode.CHART_API_FAILED,
        f"the step's time budget ({step_budget_seconds:.0f}s) ran out "
        f"before {chart_template_id} was rendered",
        {"reason": "STEP_BUDGET_EXHAUSTED", "fixtureKey": fixture_key},
        retryable=True,
    )


def worker_crashed(exc: BaseException) -> StepError:
    """A defect, an unexpected failure or an interrupt, recorded so the step never stays RUNNING."""
    return StepError(
        ErrorCode.WORKER_INTERNAL_ERROR,
        f"the worker failed unexpectedly: {type(exc).__name__}: {str(exc)[:_CAUSE_CHARS]}".rstrip(": "),
        {"exception": type(exc).__name__},
    )


def finalize_refusal_reason(exc: Exception) -> str:
    """Why the store refused a result (a document grown too large, a field of the wrong shape)."""
    return _cause(exc)


def result_not_recordable(refused: StepFinal, reason: str) -> StepError:
    """The bare failure recorded in place of a result the store refused."""
    code = f", {refused.error.code.value}" if refused.error else ""
    return StepError(
        ErrorCode.FIRESTORE_FINALIZE_FAILED,
        f"the step's result ({refused.status.value}{code}) could not be recorded: {reason}",
    )


def claim_superseded() -> StepError:
    return StepError(
        ErrorCode.STEP_LEASE_EXPIRED,
        "the step's lease expired and it was taken back before this execution wrote its manifest; "
        "a newer execution owns the step's outputs",
    )
