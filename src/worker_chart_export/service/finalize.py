"""Recording a claimed step's result: retried within the finalize budget, and replaced by a
bare failure when the store refuses the result itself, so the step never stays RUNNING."""

from __future__ import annotations

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter
from tenacity.stop import stop_base

from worker_chart_export.core import step_failures
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.exceptions import FinalizeFailed, TransientStoreError
from worker_chart_export.core.types import FinalizeOutcome, StepFinal
from worker_chart_export.service.step_context import StepContext


class stop_when_expired(stop_base):  # lower case, as tenacity names its stops
    """Stop retrying once `budget` has no time left: read on the budget's own clock, so a
    FakeClock-driven test runs the same retries without sleeping."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.budget.expired()


def finalize(ctx: StepContext, final: StepFinal) -> bool:
    """Retries transient store errors within the finalize budget; raises FinalizeFailed after it."""
    budget = Budget.starting_now(ctx.limits.finalize_budget_seconds, ctx.clock)

    def note_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        ctx.log.warning("finalize retrying", attempt=state.attempt_number, reason=str(exc))

    retrying = Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        stop=stop_when_expired(budget),
        wait=wait_exponential_jitter(multiplier=0.2, max=5.0),
        sleep=ctx.clock.sleep,
        before_sleep=note_retry,
        reraise=True,
    )
    try:
        outcome = retrying(
            ctx.ports.flow_runs.finalize_step, ctx.run_id, ctx.step_id, token=ctx.token, final=final
        )
    except TransientStoreError as exc:
        ctx.log.error(
            "finalize failed",
            error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": str(exc)},
            intendedStatus=final.status.value,
        )
        budget_s = ctx.limits.finalize_budget_seconds
        raise FinalizeFailed(
            f"step {ctx.step_id} could not be finalized within {budget_s:.0f}s: {exc}"
        ) from exc
    except Exception as exc:
        # The store refused this result itself (a document grown too large, a field of the
        # wrong shape...): record the bare failure instead, so the step does not stay RUNNING.
        outcome = _finalize_bare_failure(ctx, final, exc)
    if not outcome.written:
        ctx.log.info(
            "finalize skipped: no-op", code=ErrorCode.STEP_FINALIZE_CONFLICT.value, reason=outcome.reason
        )
    return outcome.written


def _finalize_bare_failure(ctx: StepContext, refused: StepFinal, cause: Exception) -> FinalizeOutcome:
    reason = step_failures.finalize_refusal_reason(cause)
    ctx.log.error(
        "finalize refused: recording a bare failure instead",
        error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason},
        intendedStatus=refused.status.value,
    )
    bare = ctx.failed(step_failures.result_not_recordable(refused, reason)).final
    try:
        return ctx.ports.flow_runs.finalize_step(ctx.run_id, ctx.step_id, token=ctx.token, final=bare)
    except Exception as exc:
        ctx.log.error(
            "finalize failed", error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason}
        )
        raise FinalizeFailed(f"step {ctx.step_id} could not be finalized: {reason}") from exc
