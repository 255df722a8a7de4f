"""The values a step travels with: its context, and the one report of what it came to."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from structlog.typing import FilteringBoundLogger

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import StepError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.types import StepFinal, StepStatus
from worker_chart_export.service.ports import Ports

WAITING = "WAITING"  # a StepReport's outcome while the step waits out a bad window


def new_claim_token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class StepReport:
    """What a step came to: SUCCEEDED or FAILED with its counts and `final`, what finalize
    records (`finalized`: whether ours was); WAITING (a bad window held it back: it stays
    RUNNING until `retry_at`, then is claimed again); or NOOP (nothing claimed, no `final`)."""

    run_id: str
    step_id: str
    outcome: str  # SUCCEEDED | FAILED | WAITING | NOOP
    charts_api_mode: str
    error_code: str | None = None
    message: str = ""
    manifest_uri: str | None = None
    items_count: int = 0
    failures_count: int = 0
    min_images: int | None = None
    finalized: bool = False  # False when another execution finalized first (or NOOP)
    final: StepFinal | None = field(default=None, repr=False)

    def recorded(self, written: bool) -> StepReport:
        return replace(self, finalized=written)

    @property
    def retry_at(self) -> datetime | None:
        """When a WAITING step may be claimed again."""
        return self.final.retry_at if self.final is not None else None

    def to_summary(self) -> dict[str, Any]:
        return {
            "status": self.outcome,
            "runId": self.run_id,
            "stepId": self.step_id,
            "outputsManifestGcsUri": self.manifest_uri,
            "itemsCount": self.items_count,
            "failuresCount": self.failures_count,
            "minImages": self.min_images,
            "chartsApiMode": self.charts_api_mode,
            "errorCode": self.error_code,
            "message": self.message,
            **({"retryAt": rfc3339_utc(self.retry_at)} if self.retry_at else {}),
        }


@dataclass(frozen=True)
class StepContext:
    """Everything one claimed step runs with, passed as one value."""

    run_id: str
    step_id: str
    token: str
    ports: Ports
    clock: Clock
    limits: StepLimits
    budget: Budget  # the step's: claim to the last artifact write
    log: FilteringBoundLogger

    @property
    def mode(self) -> str:
        return self.ports.chart_api.mode

    def failure(self, error: StepError) -> StepFinal:
        return StepFinal(StepStatus.FAILED, self.clock.now(), error=error)

    def failed(
        self,
        error: StepError,
        *,
        items_count: int = 0,
        failures_count: int = 0,
        min_images: int | None = None,
    ) -> StepReport:
        return self.report(
            self.failure(error), items_count=items_count, failures_count=failures_count, min_images=min_images
        )

    def report(
        self, final: StepFinal, *, items_count: int, failures_count: int, min_images: int | None
    ) -> StepReport:
        """The report of this claimed step, from what it came to (not recorded yet): every
        caller knows its counts, so none is assumed here."""
        error = final.error
        return StepReport(
            self.run_id,
            self.step_id,
            WAITING if final.retry_at is not None else final.status.value,
            self.mode,
            error_code=error.code.value if error else None,
            message=error.message if error else "",
            manifest_uri=final.outputs.get("outputsManifestGcsUri"),  # None: no manifest written
            items_count=items_count,
            failures_count=failures_count,
            min_images=min_images,
            final=final,
        )
