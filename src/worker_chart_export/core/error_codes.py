"""Error codes of the worker contract (§8) and of the error and retry model that apply here
(docs/contract.md, part 3), and the `error{code,message,details}` object a step records.
The exceptions are core/exceptions.py's."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.redaction import Redaction

if TYPE_CHECKING:  # the no-op path imports this module: the type costs it nothing
    from worker_chart_export.core.documents import ErrorDocument


class ErrorCode(StrEnum):
    # worker contract §8: written to steps[stepId].error.code and manifest failures[]
    VALIDATION_FAILED = "VALIDATION_FAILED"
    CHART_API_FAILED = "CHART_API_FAILED"
    CHART_API_LIMIT_EXCEEDED = "CHART_API_LIMIT_EXCEEDED"
    CHART_API_MOCK_MISSING = "CHART_API_MOCK_MISSING"
    GCS_WRITE_FAILED = "GCS_WRITE_FAILED"
    MANIFEST_WRITE_FAILED = "MANIFEST_WRITE_FAILED"
    # error model: infrastructure failures that can still be recorded on the step
    FLOW_RUN_INVALID = "FLOW_RUN_INVALID"
    FIRESTORE_CLAIM_FAILED = "FIRESTORE_CLAIM_FAILED"
    FIRESTORE_FINALIZE_FAILED = "FIRESTORE_FINALIZE_FAILED"
    FIRESTORE_UNAVAILABLE = "FIRESTORE_UNAVAILABLE"
    # the reaper: a RUNNING step's lease ran out and `attempt` reached the maximum, so it is
    # FAILED instead of READY again (its instance died between claim and finalize)
    STEP_LEASE_EXPIRED = "STEP_LEASE_EXPIRED"
    # a defect in the worker itself; recorded so the step never stays RUNNING
    WORKER_INTERNAL_ERROR = "WORKER_INTERNAL_ERROR"
    # error model: outcomes that are not failures and never set steps[].error
    NO_READY_STEP = "NO_READY_STEP"
    STEP_CLAIM_CONFLICT = "STEP_CLAIM_CONFLICT"
    STEP_FINALIZE_CONFLICT = "STEP_FINALIZE_CONFLICT"
    FLOW_RUN_NOT_FOUND = "FLOW_RUN_NOT_FOUND"


@dataclass(frozen=True)
class StepError:
    """The `error{code,message,details}` object; details must never hold secrets.

    `retryable`: the failure came from a bad moment (an outage, a throttle, a store blip, the
    budget spent waiting), not from the request, its account's spent quota or a missing
    fixture: the same request may succeed later, so a step it sinks waits and is tried again
    (core/step/patience.py). Not part of the recorded object."""

    code: ErrorCode
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    retryable: bool = field(default=False, compare=False)

    def redacted(self, redaction: Redaction) -> StepError:
        """The error as it may leave the process: no form of a key in its message or details
        (an exception's text or a provider's words may carry one)."""
        message, details = redaction.text(self.message), redaction.value(self.details)
        if message is self.message and details == self.details:
            return self
        return StepError(self.code, message, details, self.retryable)

    def as_retryable(self) -> StepError:
        return self if self.retryable else replace(self, retryable=True)

    def to_dict(self) -> ErrorDocument:
        data: ErrorDocument = {"code": self.code.value, "message": self.message}
        if self.details:
            data["details"] = self.details
        return data
