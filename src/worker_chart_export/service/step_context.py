"""The values a claimed step travels with: its context, its result, and the report of it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from structlog.typing import FilteringBoundLogger

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import StepError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.types import StepFinal, StepStatus
from worker_chart_export.service.ports import Ports


def new_claim_token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class StepReport:
    run_id: str
    step_id: str
    outcome: str  # SUCCEEDED | FAILED | NOOP
    charts_api_mode: str
    error_code: str | None = None
    message: str = ""
    manifest_uri: str | None = None
    items_count: int = 0
    failures_count: int = 0
    min_images: int | None = None
    finalized: bool = False  # False when another execution finalized first (or NOOP)

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

    def failed(self, error: StepError) -> StepResult:
        return StepResult(StepFinal(StepStatus.FAILED, self.clock.now(), error=error))


@dataclass(frozen=True)
class StepResult:
    """What a claimed step came to, before it is recorded."""

    final: StepFinal
    items_count: int = 0
    failures_count: int = 0
    min_images: int | None = None

    @property
    def manifest_uri(self) -> str | None:
        uri = self.final.outputs.get("outputsManifestGcsUri") if self.final.outputs else None
        return uri if isinstance(uri, str) else None


def step_report(ctx: StepContext, result: StepResult, *, finalized: bool) -> StepReport:
    """The report of a claimed step, from what it came to and whether we recorded it."""
    error = result.final.error
    return StepReport(
        ctx.run_id,
        ctx.step_id,
        result.final.status.value,
        ctx.mode,
        error_code=error.code.value if error else None,
        message=error.message if error else "",
        manifest_uri=result.manifest_uri,
        items_count=result.items_count,
        failures_count=result.failures_count,
        min_images=result.min_images,
        finalized=finalized,
    )
