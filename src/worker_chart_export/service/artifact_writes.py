"""A PNG or the manifest, written once the charts are paid for: a write that fails for a bad
moment (a 5xx, a timeout, a reset: `ArtifactWriteError.transient`) is tried again with the
reference backoff (core.retry.ARTIFACT_WRITES: 1 s doubling, 5 attempts; error model, partial
failures 3: retry only the failing part), cut to the budget it runs in, so a blip of seconds
costs seconds and never a chart already paid for. What is left failing is the caller's (a
GCS_WRITE_FAILED chart, or a step that waits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import ArtifactWriteError
from worker_chart_export.core.retry import within_budget
from worker_chart_export.service.step_context import StepContext

T = TypeVar("T")


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ArtifactWriteError) and exc.transient


def write_patiently(ctx: StepContext, budget: Budget, write: Callable[[], T], *, what: str) -> T:
    """`write()`, tried again while it fails transiently, within `budget`; raises the last
    ArtifactWriteError (or anything else at once)."""
    policy = ctx.limits.artifact_writes

    def note_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        ctx.log.warning(
            "artifact write retrying",
            object=what,
            attempt=state.attempt_number,
            waitSeconds=round(state.upcoming_sleep, 3),
            reason=str(exc),
        )

    retrying = Retrying(
        retry=retry_if_exception(_transient),
        stop=policy.stop(budget),
        wait=within_budget(policy.wait(), budget),
        sleep=ctx.clock.sleep,
        before_sleep=note_retry,
        reraise=True,
    )
    return retrying(write)
