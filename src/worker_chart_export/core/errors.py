"""Error codes of the worker contract (§8) and of the error and retry model that apply here
(docs/contract.md, part 3), and the worker's exception tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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
    """The `error{code,message,details}` object; details must never hold secrets."""

    code: ErrorCode
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.details:
            data["details"] = self.details
        return data


class WorkerError(Exception):
    """Base for errors the worker raises on purpose."""


class ConfigError(WorkerError):
    """The worker's own configuration is unusable (bad env, malformed accounts JSON...).

    It carries the setting it is about, by the environment variable a user sets it with,
    and the problem on its own, so that an edge which took the value from somewhere else
    (a CLI flag, a file) names that instead: `render(label)`. `source` says where exactly,
    when the setting only points at the value (e.g. the secret version read).
    """

    def __init__(self, setting: str, problem: str, *, source: str | None = None) -> None:
        self.setting = setting
        self.problem = problem
        self.source = source
        super().__init__(self.render())

    def render(self, label: str | None = None) -> str:
        if label is None:
            label = f"{self.setting} {self.source}" if self.source else self.setting
        return f"{label}: {self.problem}"


class TransientStoreError(WorkerError):
    """A store (Firestore, GCS) failed in a way worth retrying: timeouts, 5xx, unavailable."""


class ArtifactWriteError(WorkerError):
    """Writing an object failed after the adapter's own bounded retries."""


class RedeliverEvent(WorkerError):
    """The invocation must fail (HTTP 5xx) so that Eventarc delivers the event again."""


class ClaimSuperseded(WorkerError):
    """Our claim was taken back (its lease expired and the reaper made the step READY or
    FAILED) before our result was written: a newer execution owns the step's outputs."""


class FinalizeFailed(RedeliverEvent):
    """The step's result could not be recorded within the finalize budget."""
