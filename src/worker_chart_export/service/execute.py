"""execute_step: the one place that runs a CHART_EXPORT step, from claim to finalize.

The CloudEvent function and `run-local` both call it; they differ only in the ports they
pass. Guarantee: once the claim succeeded, the step is finalized SUCCEEDED or FAILED, or the
invocation fails loudly (a RedeliverEvent: the finalize, the manifest's fence or a late
template read met a store outage) and the step keeps its lease for the reaper — never left
RUNNING silently by our fault, and never FAILED for a transient store error.

The story: check the bucket -> read templates (service/step_templates.py) -> claim -> read
them again (the versions current at the claim) -> validate -> reuse what an earlier execution
wrote -> render the rest concurrently -> write the manifest and decide (service/outcome.py) ->
finalize (retried in its budget). run-local's loop around it (a step that waits is waited for
and run again) is service/local_run.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import structlog
from structlog.typing import FilteringBoundLogger

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import (
    BucketUnusable,
    ClaimContended,
    RedeliverEvent,
    StorageUnavailable,
    TransientStoreError,
)
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.step import step_failures
from worker_chart_export.core.step.step_rules import RunVersion, step_of
from worker_chart_export.core.step.validation import validate_step
from worker_chart_export.core.types import (
    Claim,
    ClaimResult,
    ClaimStatus,
)
from worker_chart_export.logs import get_logger
from worker_chart_export.service.finalize import finalize
from worker_chart_export.service.outcome import write_manifest_and_decide
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.render import render_charts
from worker_chart_export.service.reuse import reuse_earlier_charts
from worker_chart_export.service.step_context import (
    StepContext,
    StepReport,
    new_claim_token,
)
from worker_chart_export.service.step_templates import TemplatesRead, read_before_claim, templates_of

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument

__all__ = ["StepReport", "execute_step"]


def execute_step(
    run_id: str,
    step_id: str,
    *,
    ports: Ports,
    limits: StepLimits,
    clock: Clock,
    seen: RunVersion | None = None,
) -> StepReport:
    """`seen`: the version of the run the event carried, which the claim is planned from
    (one commit when it is current); None (run-local, the CLI): the store reads first."""
    # Bound in the context (copied into the render threads) so adapters' lines carry them too.
    with structlog.contextvars.bound_contextvars(runId=run_id, stepId=step_id):
        log: FilteringBoundLogger = get_logger().bind(chartsApi={"mode": ports.chart_api.mode})
        ctx = StepContext(
            run_id,
            step_id,
            new_claim_token(),
            ports,
            clock,
            limits,
            Budget.starting_now(limits.step_budget_seconds, clock),
            log,
        )
        _check_bucket(ctx)
        templates = read_before_claim(ctx, seen)  # a blip: a redelivery, nothing claimed
        began = clock.monotonic()
        claim = _claim(ctx, seen)
        claim_ms = round((clock.monotonic() - began) * 1000, 1)
        if claim.status is not ClaimStatus.CLAIMED or claim.flow_run is None:
            return _noop(ctx, claim, claim_ms)
        log.info(
            "claim succeeded",
            attempt=claim.claim.attempt if claim.claim else None,
            flowKey=claim.flow_run.get("flowKey"),
            durationMs=claim_ms,
        )
        report = _run_claimed_or_record_crash(ctx, claim.flow_run, claim.claim, templates)
        written = finalize(ctx, report.final) if report.final else False  # always one when claimed
        _log_completed(report, ctx, written)
        return report.recorded(written)


def _check_bucket(ctx: StepContext) -> None:
    """Before the claim, so a bucket that cannot store anything costs no claim, no quota and
    no CHART-IMG call: the step stays READY and the redelivered event runs it once the bucket
    is back (one listing of one name per event with work; docs/design.md, "Charts, artifacts
    and the outcome")."""
    try:
        ctx.ports.artifacts.check_bucket()
    except BucketUnusable as exc:
        raise StorageUnavailable(
            f"step {ctx.step_id} not claimed: the charts bucket cannot store it: {exc}"
        ) from exc


def _claim(ctx: StepContext, seen: RunVersion | None) -> ClaimResult:
    now = ctx.clock.now()
    try:
        return ctx.ports.flow_runs.claim_step(
            ctx.run_id,
            ctx.step_id,
            token=ctx.token,
            now=now,
            lease_expires_at=now + timedelta(seconds=ctx.limits.lease_seconds),
            seen=seen,
        )
    except ClaimContended as exc:
        # Other writes of the run kept coming first while the step stayed READY: whoever
        # claims it on the next delivery does the work.
        raise RedeliverEvent(str(exc)) from exc
    except TransientStoreError as exc:
        # The store confirmed no claim of ours (it re-reads after an outage), so a redelivery
        # is safe and is the only way to get the work done.
        ctx.log.error(
            "claim failed", error={"code": ErrorCode.FIRESTORE_CLAIM_FAILED.value, "message": str(exc)}
        )
        raise RedeliverEvent(f"claim of {ctx.step_id} could not reach the store: {exc}") from exc


def _noop(ctx: StepContext, claim: ClaimResult, claim_ms: float) -> StepReport:
    code = (
        ErrorCode.FLOW_RUN_NOT_FOUND
        if claim.status is ClaimStatus.NOT_FOUND
        else ErrorCode.STEP_CLAIM_CONFLICT
    )
    ctx.log.info("claim not taken: no-op", code=code.value, reason=claim.reason, durationMs=claim_ms)
    return StepReport(ctx.run_id, ctx.step_id, "NOOP", ctx.mode, error_code=code.value, message=claim.reason)


def _run_claimed_or_record_crash(
    ctx: StepContext, flow_run: FlowRunDocument, claim: Claim | None, templates: TemplatesRead | None
) -> StepReport:
    try:
        return _run_claimed(ctx, flow_run, claim, templates)
    except RedeliverEvent:
        # A store blip in the claimed step (a late template read, the manifest's fence, the
        # bucket gone): nothing to record, the step is left to its lease (never a FAILED step
        # for what a retry can finish).
        ctx.budget.cancel()
        raise
    except BaseException as exc:
        # A defect, an unexpected failure or an interrupt (Ctrl-C, shutdown): stop what is
        # still running, record it on the step, then let the caller see it.
        ctx.budget.cancel()
        ctx.log.exception("step crashed", error={"code": ErrorCode.WORKER_INTERNAL_ERROR.value})
        finalize(ctx, ctx.failure(step_failures.worker_crashed(exc)))
        raise


def _run_claimed(
    ctx: StepContext, flow_run: FlowRunDocument, claim: Claim | None, read: TemplatesRead | None
) -> StepReport:
    step = step_of(flow_run, ctx.step_id)
    validated = validate_step(
        flow_run,
        ctx.run_id,
        ctx.step_id,
        templates_of(ctx, step, read),  # read again: the versions current at the claim
        ctx.limits,
    )
    if isinstance(validated, StepError):
        ctx.log.warning("step inputs invalid", error=validated.to_dict())
        return ctx.failed(validated)
    try:
        reuse = reuse_earlier_charts(ctx, validated, claim.attempt if claim else None, step)
        rendered = render_charts(ctx, validated, reuse)
        return write_manifest_and_decide(ctx, validated, rendered, claim, step)
    except BucketUnusable as exc:
        # Gone since the check before the claim: nothing written is lost, and a FAILED step
        # would end what a retry can finish. The reaper gives it back after its lease; until
        # the bucket is back, its events answer 503 before any claim.
        raise RedeliverEvent(
            f"step {ctx.step_id} left to its lease: the charts bucket is gone: {exc}"
        ) from exc


# --- the report ----------------------------------------------------------------------------


def _log_completed(result: StepReport, ctx: StepContext, written: bool) -> None:
    if result.retry_at is not None:
        ctx.log.warning(
            "step waits: a bad window held it back",
            retryAt=rfc3339_utc(result.retry_at),
            error={"code": result.error_code, "message": result.message},
            itemsCount=result.items_count,
            failuresCount=result.failures_count,
            minImages=result.min_images,
            outputsManifestGcsUri=result.manifest_uri,
            recorded=written,
        )
        return
    ctx.log.info(
        "step completed",
        status=result.outcome,
        error={"code": result.error_code, "message": result.message} if result.error_code else None,
        itemsCount=result.items_count,
        failuresCount=result.failures_count,
        minImages=result.min_images,
        outputsManifestGcsUri=result.manifest_uri,
        finalized=written,
    )
