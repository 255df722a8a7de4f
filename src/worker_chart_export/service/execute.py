"""execute_step: the one place that runs a CHART_EXPORT step, from claim to finalize.

The CloudEvent function and `run-local` both call it; they differ only in the ports they
pass. Guarantee: once the claim succeeded, the step is finalized SUCCEEDED or FAILED, or the
invocation fails loudly (a RedeliverEvent: the finalize, the manifest's fence or a late
template read met a store outage) and the step keeps its lease for the reaper — never left
RUNNING silently by our fault, and never FAILED for a transient store error.

The story: check the bucket -> read templates (service/step_templates.py) -> claim ->
validate -> reuse what an earlier execution wrote -> render the rest concurrently -> write
the manifest -> decide -> finalize (retried in its budget).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import structlog
from structlog.typing import FilteringBoundLogger

from worker_chart_export import known_keys
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import (
    ArtifactWriteError,
    BucketUnusable,
    ClaimContended,
    ClaimSuperseded,
    RedeliverEvent,
    StorageUnavailable,
    TransientStoreError,
)
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import manifest_object_path, moment_of, rfc3339_utc
from worker_chart_export.core.step import step_failures
from worker_chart_export.core.step.manifest import (
    ManifestFailure,
    ManifestHeader,
    build_manifest,
    manifest_bytes,
)
from worker_chart_export.core.step.patience import (
    Failed,
    StepAttempt,
    Succeeded,
    Verdict,
    after_bad_moment,
    judge_charts,
    waiting_step_ids,
    waits_of,
)
from worker_chart_export.core.step.selection import choose_step
from worker_chart_export.core.step.step_rules import RunVersion, lease_surely_held, step_of, steps_of
from worker_chart_export.core.step.validation import ValidatedStep, validate_step
from worker_chart_export.core.types import (
    Claim,
    ClaimResult,
    ClaimStatus,
    StepFinal,
    StepStatus,
)
from worker_chart_export.logs import get_logger
from worker_chart_export.service.artifact_writes import write_patiently
from worker_chart_export.service.finalize import finalize
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.render import RenderedCharts, render_charts
from worker_chart_export.service.reuse import reuse_earlier_charts
from worker_chart_export.service.step_context import (
    StepContext,
    StepReport,
    new_claim_token,
)
from worker_chart_export.service.step_templates import TemplatesRead, read_before_claim, templates_of

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument, StepDocument, StepOutputs

__all__ = ["StepReport", "execute_chosen_step", "execute_step"]


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


def execute_chosen_step(
    flow_run: FlowRunDocument,
    step_id: str | None,
    *,
    ports: Ports,
    limits: StepLimits,
    clock: Clock,
    started: Callable[[], None] = lambda: None,
    take_back: TakeBack | None = None,
) -> StepReport:
    """run-local's one call: the step `step_id` names (else the first READY CHART_EXPORT
    one) chosen from the run as read once, then executed, or a NOOP report when there is none.
    With `take_back` (the reaper's plan for a step whose wait is over, applied to the store),
    a step that waits, found so or left so by a bad window, is waited for, taken back and
    executed again until it settles: the cloud's reaper and next event, in one process.
    Raises StepSelectionError for a `step_id` that is no CHART_EXPORT step of the run, before
    `started()` (the caller's "it has begun") is called."""
    chosen = choose_step(flow_run, step_id)
    waiting = _waiting(flow_run, step_id) if take_back is not None else None
    started()
    run_id = str(flow_run.get("runId"))
    if chosen is None and waiting is None:
        code = ErrorCode.NO_READY_STEP.value
        get_logger().info("no READY CHART_EXPORT step: no-op", runId=run_id, code=code)
        message = "no READY CHART_EXPORT step in the flow_run"
        return StepReport(run_id, "", "NOOP", ports.chart_api.mode, error_code=code, message=message)
    if waiting is not None and take_back is not None:
        _wait_and_take_back(run_id, waiting, clock, take_back, retry_at=waiting_since(flow_run, waiting))
        chosen = waiting
    assert chosen is not None
    report = execute_step(run_id, chosen, ports=ports, limits=limits, clock=clock)
    while take_back is not None and report.retry_at is not None:
        _wait_and_take_back(run_id, chosen, clock, take_back, retry_at=report.retry_at)
        report = execute_step(run_id, chosen, ports=ports, limits=limits, clock=clock)
    return report


# (run id, step id, now): the reaper's plan for the step, applied (None: nothing to take back)
TakeBack = Callable[[str, str, datetime], object]


def _waiting(flow_run: FlowRunDocument, step_id: str | None) -> str | None:
    """The step that waits out a bad window: the one named, else the first; None if none."""
    waiting = waiting_step_ids(steps_of(flow_run))
    if step_id is not None:
        return step_id if step_id in waiting else None
    return waiting[0] if waiting else None


def waiting_since(flow_run: FlowRunDocument, step_id: str) -> datetime:
    """When the waiting step may be tried again (at once, if that is unreadable)."""
    step = step_of(flow_run, step_id)
    return moment_of(step.get("retryAt") if step is not None else None) or datetime.min.replace(tzinfo=UTC)


def _wait_and_take_back(
    run_id: str, step_id: str, clock: Clock, take_back: TakeBack, *, retry_at: datetime
) -> None:
    seconds = max(0.0, (retry_at - clock.now()).total_seconds())
    get_logger().info(
        "waiting for the step's next attempt", runId=run_id, stepId=step_id, retryAt=rfc3339_utc(retry_at)
    )
    clock.sleep(seconds)
    take_back(run_id, step_id, clock.now())


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
        templates_of(ctx, step, read),  # read now only what was not read before the claim
        default_timezone=ctx.limits.default_timezone,
        plans=ctx.limits.plans,
    )
    if isinstance(validated, StepError):
        ctx.log.warning("step inputs invalid", error=validated.to_dict())
        return ctx.failed(validated)
    try:
        reuse = reuse_earlier_charts(ctx, validated, claim.attempt if claim else None, step)
        rendered = render_charts(ctx, validated, reuse)
        return _write_manifest_and_decide(ctx, validated, rendered, claim, step)
    except BucketUnusable as exc:
        # Gone since the check before the claim: nothing written is lost, and a FAILED step
        # would end what a retry can finish. The reaper gives it back after its lease; until
        # the bucket is back, its events answer 503 before any claim.
        raise RedeliverEvent(
            f"step {ctx.step_id} left to its lease: the charts bucket is gone: {exc}"
        ) from exc


def _still_ours(ctx: StepContext, claim: Claim | None) -> bool:
    """The fence before the manifest: inside the lease no reaper can have taken the step
    back, so only a late execution (or a claim without its lease) reads the run document."""
    if claim is not None and lease_surely_held(claim.lease_expires_at, ctx.clock.now()):
        return True
    return ctx.ports.flow_runs.claim_is_current(ctx.run_id, ctx.step_id, ctx.token)


def _write_manifest_and_decide(
    ctx: StepContext,
    validated: ValidatedStep,
    rendered: RenderedCharts,
    claim: Claim | None,
    step: StepDocument | None,
) -> StepReport:
    header = ManifestHeader(
        ctx.run_id,
        ctx.step_id,
        validated.symbol,
        validated.timeframe,
        validated.min_images,
        validated.requests,
        ctx.mode,
    )
    # the manifest is public-read: no form of a key in a failure (CHART-IMG's words, an exception's)
    redaction = known_keys.redaction()
    failures = [ManifestFailure(f.request, f.error.redacted(redaction)) for f in rendered.failures]
    manifest = build_manifest(header, rendered.items, failures, created_at=ctx.clock.now())
    counts = {  # what the report and a manifest-write failure carry
        "items_count": len(rendered.items),
        "failures_count": len(rendered.failures),
        "min_images": validated.min_images,
    }
    try:
        manifest_uri = write_patiently(
            ctx,
            ctx.budget,
            lambda: ctx.ports.artifacts.put_manifest(
                manifest_object_path(ctx.run_id, ctx.step_id),
                manifest_bytes(manifest),
                still_ours=lambda: _still_ours(ctx, claim),
            ),
            what="manifest",
        )
    except ClaimSuperseded as exc:
        # The reaper took the step back (our lease expired): a newer execution owns its
        # outputs. Nothing of ours is written over them; the finalize will be refused too.
        ctx.log.warning("manifest not written: claim superseded", reason=str(exc))
        return ctx.failed(step_failures.claim_superseded(), **counts)
    except TransientStoreError as exc:
        # The fence could not read the step (a Firestore blip): whether the claim still holds
        # is unknown, so no manifest; and a FAILED step would throw away charts already paid
        # for. The step keeps its lease: the reaper makes it READY again after it, and the
        # next execution reuses these PNGs (service/reuse.py) at no further cost.
        raise RedeliverEvent(
            f"step {ctx.step_id} left to its lease: its claim could not be checked before the "
            f"manifest was written ({len(rendered.items)} charts stored for the retry to reuse): {exc}"
        ) from exc
    except ArtifactWriteError as exc:
        write_error = step_failures.manifest_write_failed(exc, **counts)
        ctx.log.error("manifest write failed", error=write_error.to_dict())
        if not write_error.retryable:
            return ctx.failed(write_error, **counts)
        waits_or_fails = after_bad_moment(write_error, _attempt(ctx, claim, step))
        return ctx.report(_final(ctx, waits_or_fails, {}), **counts)
    ctx.log.info(
        "manifest written",
        gcsUri=manifest_uri,
        itemsCount=len(rendered.items),
        failuresCount=len(rendered.failures),
        minImages=validated.min_images,
    )
    order = {r["chartTemplateId"]: i for i, r in enumerate(validated.requests)}
    in_request_order = sorted(rendered.failures, key=lambda f: order[f.request["chartTemplateId"]])
    verdict = judge_charts(
        len(rendered.items),
        [f.error for f in in_request_order],  # not the threads' order: the step error is the same each run
        min_images=validated.min_images,
        requested=len(validated.requests),
        attempt=_attempt(ctx, claim, step),
    )
    return ctx.report(_final(ctx, verdict, {"outputsManifestGcsUri": manifest_uri}), **counts)


def _attempt(ctx: StepContext, claim: Claim | None, step: StepDocument | None) -> StepAttempt:
    """Which attempt of the step this is, its policy, and the waits before it."""
    number = claim.attempt if claim is not None else 1
    return StepAttempt(number, ctx.limits.step_retries, ctx.clock.now(), waits_of(step))


def _final(ctx: StepContext, verdict: Verdict, outputs: StepOutputs) -> StepFinal:
    now = ctx.clock.now()
    if isinstance(verdict, Succeeded):
        return StepFinal(StepStatus.SUCCEEDED, now, outputs=outputs)
    if isinstance(verdict, Failed):
        return StepFinal(StepStatus.FAILED, now, outputs=outputs, error=verdict.error)
    return StepFinal.waiting(now, verdict.until, verdict.cause, outputs)


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
