"""execute_step: the one place that runs a CHART_EXPORT step, from claim to finalize.

The CloudEvent function and `run-local` both call it; they differ only in the ports they
pass. Guarantee: once the claim succeeded, the step is finalized SUCCEEDED or FAILED, or the
invocation fails loudly (FinalizeFailed) — it is never left RUNNING silently by our fault.

The story: claim -> read templates -> validate -> render the charts concurrently -> write
the manifest -> decide the status -> finalize (retried within its own budget).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple

import structlog
from structlog.typing import FilteringBoundLogger

from worker_chart_export.core import step_failures
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import (
    ArtifactWriteError,
    ClaimContended,
    ClaimSuperseded,
    RedeliverEvent,
    TransientStoreError,
)
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.manifest import (
    ManifestFailure,
    ManifestHeader,
    ManifestItem,
    build_manifest,
    manifest_bytes,
)
from worker_chart_export.core.naming import manifest_object_path, png_object_path
from worker_chart_export.core.outcome import insufficient_images_error, step_status
from worker_chart_export.core.selection import steps_of
from worker_chart_export.core.step_rules import RunVersion, lease_surely_held
from worker_chart_export.core.types import (
    ChartCall,
    ChartFailure,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    StepFinal,
    StepStatus,
)
from worker_chart_export.core.validation import ValidatedStep, requested_template_ids, validate_step
from worker_chart_export.logs import get_logger
from worker_chart_export.service.finalize import finalize
from worker_chart_export.service.ports import ChartSession, Ports
from worker_chart_export.service.step_context import (
    StepContext,
    StepReport,
    StepResult,
    new_claim_token,
    step_report,
)

__all__ = ["StepReport", "execute_step"]


class _Counts(NamedTuple):
    items_count: int
    failures_count: int
    min_images: int


@dataclass
class _Rendered:
    items: list[ManifestItem] = field(default_factory=list)
    failures: list[ManifestFailure] = field(default_factory=list)


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
        result = _run_claimed_or_record_crash(ctx, claim.flow_run, claim.claim)
        written = finalize(ctx, result.final)
        _log_completed(ctx, result, written)
        return step_report(ctx, result, finalized=written)


def _claim(ctx: StepContext, seen: RunVersion | None) -> ClaimOutcome:
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


def _noop(ctx: StepContext, claim: ClaimOutcome, claim_ms: float) -> StepReport:
    code = (
        ErrorCode.FLOW_RUN_NOT_FOUND
        if claim.status is ClaimStatus.NOT_FOUND
        else ErrorCode.STEP_CLAIM_CONFLICT
    )
    ctx.log.info("claim not taken: no-op", code=code.value, reason=claim.reason, durationMs=claim_ms)
    return StepReport(ctx.run_id, ctx.step_id, "NOOP", ctx.mode, error_code=code.value, message=claim.reason)


def _run_claimed_or_record_crash(
    ctx: StepContext, flow_run: dict[str, Any], claim: Claim | None
) -> StepResult:
    try:
        return _run_claimed(ctx, flow_run, claim)
    except BaseException as exc:
        # A defect, an unexpected failure or an interrupt (Ctrl-C, shutdown): stop what is
        # still running, record it on the step, then let the caller see it.
        ctx.budget.cancel()
        ctx.log.exception("step crashed", error={"code": ErrorCode.WORKER_INTERNAL_ERROR.value})
        finalize(ctx, ctx.failed(step_failures.worker_crashed(exc)).final)
        raise


def _run_claimed(ctx: StepContext, flow_run: dict[str, Any], claim: Claim | None) -> StepResult:
    step = steps_of(flow_run).get(ctx.step_id) or {}
    try:
        templates = ctx.ports.templates.get_templates(requested_template_ids(step))
    except TransientStoreError as exc:
        return ctx.failed(step_failures.templates_unreadable(exc))
    validated = validate_step(
        flow_run,
        ctx.run_id,
        ctx.step_id,
        templates,
        default_timezone=ctx.limits.default_timezone,
        plan=ctx.limits.plan,
    )
    if isinstance(validated, StepError):
        ctx.log.warning("step inputs invalid", error=validated.to_dict())
        return ctx.failed(validated)
    # Charts may not eat the time the manifest write needs: without a manifest the step fails.
    rendered = _render_all(ctx, validated, ctx.budget.ending_earlier(ctx.limits.charts_reserve_seconds))
    return _write_manifest_and_decide(ctx, validated, rendered, claim)


def _still_ours(ctx: StepContext, claim: Claim | None) -> bool:
    """The fence before the manifest: inside the lease no reaper can have taken the step
    back, so only a late execution (or a claim without its lease) reads the run document."""
    if claim is not None and lease_surely_held(claim.lease_expires_at, ctx.clock.now()):
        return True
    return ctx.ports.flow_runs.claim_is_current(ctx.run_id, ctx.step_id, ctx.token)


def _write_manifest_and_decide(
    ctx: StepContext, validated: ValidatedStep, rendered: _Rendered, claim: Claim | None
) -> StepResult:
    header = ManifestHeader(
        ctx.run_id,
        ctx.step_id,
        validated.symbol,
        validated.timeframe,
        validated.min_images,
        validated.requests,
        ctx.mode,
    )
    manifest = build_manifest(header, rendered.items, rendered.failures, created_at=ctx.clock.now())
    counts = _Counts(len(rendered.items), len(rendered.failures), validated.min_images)
    try:
        manifest_uri = ctx.ports.artifacts.put_manifest(
            manifest_object_path(ctx.run_id, ctx.step_id),
            manifest_bytes(manifest),
            still_ours=lambda: _still_ours(ctx, claim),
        )
    except ClaimSuperseded as exc:
        # The reaper took the step back (our lease expired): a newer execution owns its
        # outputs. Nothing of ours is written over them; the finalize will be refused too.
        ctx.log.warning("manifest not written: claim superseded", reason=str(exc))
        return StepResult(ctx.failed(step_failures.claim_superseded()).final, *counts)
    except (ArtifactWriteError, TransientStoreError) as exc:
        write_error = step_failures.manifest_write_failed(exc, **counts._asdict())
        ctx.log.error("manifest write failed", error=write_error.to_dict())
        return StepResult(ctx.failed(write_error).final, *counts)
    ctx.log.info(
        "manifest written",
        gcsUri=manifest_uri,
        itemsCount=counts.items_count,
        failuresCount=counts.failures_count,
        minImages=counts.min_images,
    )
    status = step_status(counts.items_count, validated.min_images)
    error = None
    if status is StepStatus.FAILED:
        error = insufficient_images_error(
            counts.items_count,
            validated.min_images,
            len(validated.requests),
            [f.error.code for f in rendered.failures],
        )
    outputs = {"outputsManifestGcsUri": manifest_uri}
    return StepResult(StepFinal(status, ctx.clock.now(), outputs=outputs, error=error), *counts)


def _render_all(ctx: StepContext, validated: ValidatedStep, budget: Budget) -> _Rendered:
    """All requests concurrently (bounded), each yielding one item or one failure."""
    workers = min(ctx.limits.chart_concurrency, len(validated.calls))
    # the step's own chart session: its first wave's quota in one round trip, not one per chart
    with ctx.ports.chart_api.for_step(validated.calls[:workers], budget) as charts:
        return _render_in_pool(ctx, charts, validated, budget, workers)


def _render_in_pool(
    ctx: StepContext, charts: ChartSession, validated: ValidatedStep, budget: Budget, workers: int
) -> _Rendered:
    rendered = _Rendered()
    requests = {r["chartTemplateId"]: r for r in validated.requests}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chart")
    try:
        futures: dict[Future[ManifestItem | ManifestFailure], ChartCall] = {
            pool.submit(
                contextvars.copy_context().run,
                _render_one,
                ctx,
                charts,
                call,
                requests[call.chart_template_id],
                validated.templates,
            ): call
            for call in validated.calls
        }
        done, not_done = wait(futures, timeout=budget.remaining())
        for future in done:
            outcome = future.result()
            if isinstance(outcome, ManifestItem):
                rendered.items.append(outcome)
            else:
                rendered.failures.append(outcome)
        for future in not_done:
            call = futures[future]
            future.cancel()
            ctx.log.warning("chart abandoned: step budget exhausted", chartTemplateId=call.chart_template_id)
            error = step_failures.chart_abandoned(
                call.chart_template_id, call.fixture_key, ctx.limits.step_budget_seconds
            )
            rendered.failures.append(ManifestFailure(requests[call.chart_template_id], error))
    finally:
        # Late calls may still finish in the background; their PNGs are simply not listed.
        pool.shutdown(wait=False, cancel_futures=True)
    return rendered


def _render_one(
    ctx: StepContext,
    charts: ChartSession,
    call: ChartCall,
    request: dict[str, Any],
    templates: Mapping[str, Mapping[str, Any]],
) -> ManifestItem | ManifestFailure:
    log = ctx.log.bind(
        chartTemplateId=call.chart_template_id,
        chartsApi={"mode": ctx.mode, "fixtureKey": call.fixture_key},
    )
    log.info("chart api call started", symbol=call.chart_img_symbol, interval=call.interval)
    began = ctx.clock.monotonic()
    result = charts.render(call)
    duration_ms = round((ctx.clock.monotonic() - began) * 1000, 1)
    if isinstance(result, ChartFailure):
        log.warning(
            "chart api call finished", status="failed", durationMs=duration_ms, error=result.error.to_dict()
        )
        return ManifestFailure(request, result.error)
    log.info("chart api call finished", status="succeeded", durationMs=duration_ms, bytes=len(result.png))

    generated_at = ctx.clock.now()
    path = png_object_path(
        call.run_id, call.step_id, generated_at, call.chart_img_symbol, call.interval, call.chart_template_id
    )
    try:
        uri = ctx.ports.artifacts.create_png(path, result.png)
    except ArtifactWriteError as exc:
        error = step_failures.png_write_failed(exc, path)
        log.error("png write failed", error=error.to_dict())
        return ManifestFailure(request, error)
    description = str(templates[call.chart_template_id]["description"])
    return ManifestItem(call.chart_template_id, description, generated_at, uri, call.chart_img_symbol)


# --- the report ----------------------------------------------------------------------------


def _log_completed(ctx: StepContext, result: StepResult, written: bool) -> None:
    error = result.final.error
    ctx.log.info(
        "step completed",
        status=result.final.status.value,
        error={"code": error.code.value, "message": error.message} if error else None,
        itemsCount=result.items_count,
        failuresCount=result.failures_count,
        minImages=result.min_images,
        outputsManifestGcsUri=result.manifest_uri,
        finalized=written,
    )
