"""Recording a claimed step's result: retried within the finalize budget, and replaced by a
bare failure when the store refuses the result itself, so the step never stays RUNNING.

The layers a finalize can take, outermost first, with the production constants:

1. here: tenacity retries TransientStoreError (an outage, or contention the store gave up
   on), waiting core.retry.FINALIZE (0.2 s doubling, plus up to 1 s jitter, at most 5 s) cut
   to the budget's end (`core.retry.within_budget`), and stops with the one budget stop
   (`core.retry.stop_before_budget_ends`): no call starts after the finalize budget
   F = FINALIZE_BUDGET_SECONDS (settings: 30 s) and no sleep runs past it.
2. one FlowRunStore.finalize_step (adapters/firestore/flow_runs.py): a compare-and-set
   loop, a read when the claim's version is not remembered, then up to
   A = DEFAULT_TRANSACTION_ATTEMPTS = 5 rounds of a commit and, when it lost to another
   write, a read: at most 1 + 2A = 11 RPCs. An outage ends the call at once (layer 1).
3. each RPC (adapters/firestore/client.py, RpcOptions): api_core's Retry with the deadline
   T = DEFAULT_RPC_TIMEOUT_SECONDS = 10 s starts no attempt after T, and each attempt's
   timeout is what is left of T, except that api_core gives an attempt started in T's
   last second the whole T again: under 2T = 20 s.

Worst case: one store call C < (1 + 2A) x 2T = 11 x 20 s = 220 s; a finalize
F + C = 30 + 220 = 250 s (the last call starts by F), and F + 2C = 30 + 440 = 470 s when
the store refuses the result itself and the bare failure is one more call. Only F is
inside the request's timeout (the step budget leaves it); the rest runs past it, where
Cloud Run may end the request and the reaper then takes the step back.
tests/unit/service/test_finalize_worst_case.py computes these from the constants.
"""

from __future__ import annotations

from dataclasses import replace

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from worker_chart_export import known_keys
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.exceptions import FinalizeFailed, TransientStoreError
from worker_chart_export.core.retry import FINALIZE, within_budget
from worker_chart_export.core.step import step_failures
from worker_chart_export.core.types import FinalizeResult, StepFinal
from worker_chart_export.service.step_context import StepContext


def finalize(ctx: StepContext, final: StepFinal) -> bool:
    """Retries transient store errors within the finalize budget; raises FinalizeFailed after it."""
    final = _without_keys(final)
    budget = Budget.starting_now(ctx.limits.finalize_budget_seconds, ctx.clock)

    def note_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        ctx.log.warning("finalize retrying", attempt=state.attempt_number, reason=str(exc))

    retrying = Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        stop=FINALIZE.stop(budget),
        wait=within_budget(FINALIZE.wait(), budget),
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


def _without_keys(final: StepFinal) -> StepFinal:
    """The run document is an exit: no form of a key in the step's error (an exception's text
    or CHART-IMG's words may carry one)."""
    if final.error is None:
        return final
    return replace(final, error=final.error.redacted(known_keys.redaction()))


def _finalize_bare_failure(ctx: StepContext, refused: StepFinal, cause: Exception) -> FinalizeResult:
    reason = step_failures.finalize_refusal_reason(cause)
    ctx.log.error(
        "finalize refused: recording a bare failure instead",
        error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason},
        intendedStatus=refused.status.value,
    )
    bare = _without_keys(ctx.failure(step_failures.result_not_recordable(refused, reason)))
    try:
        return ctx.ports.flow_runs.finalize_step(ctx.run_id, ctx.step_id, token=ctx.token, final=bare)
    except Exception as exc:
        ctx.log.error(
            "finalize failed", error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason}
        )
        raise FinalizeFailed(f"step {ctx.step_id} could not be finalized: {reason}") from exc
