"""execute_step: the one place that runs a CHART_EXPORT step, from claim to finalize.

The CloudEvent function and `run-local` both call it; they differ only in the ports they
pass. Guarantee: once the claim succeeded, the step is finalized SUCCEEDED or FAILED, or the
invocation fails loudly (FinalizeFailed) — it is never left RUNNING silently by our fault.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.errors import (
    ArtifactWriteError,
    ErrorCode,
    FinalizeFailed,
    RedeliverEvent,
    StepError,
    TransientStoreError,
)
from worker_chart_export.core.manifest import (
    ManifestFailure,
    ManifestItem,
    build_manifest,
    manifest_bytes,
)
from worker_chart_export.core.naming import manifest_object_path, png_object_path
from worker_chart_export.core.outcome import insufficient_images_error, step_status
from worker_chart_export.core.selection import steps_of
from worker_chart_export.core.types import (
    ChartCall,
    ChartFailure,
    ClaimStatus,
    StepFinal,
    StepStatus,
)
from worker_chart_export.core.validation import ValidatedStep, requested_template_ids, validate_step
from worker_chart_export.logs import get_logger
from worker_chart_export.ports import Ports

if TYPE_CHECKING:
    from worker_chart_export.config import Settings


MANIFEST_RESERVE_SECONDS = 20.0


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Clocks:
    """Time and randomness, injected so tests control them."""

    now: Callable[[], datetime] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    new_token: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)


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


@dataclass
class _Rendered:
    items: list[ManifestItem] = field(default_factory=list)
    failures: list[ManifestFailure] = field(default_factory=list)


def execute_step(
    run_id: str, step_id: str, *, ports: Ports, settings: Settings, clocks: Clocks | None = None
) -> StepReport:
    clocks = clocks or Clocks()
    # Bound in the context (copied into the render threads) so adapters' lines carry them too.
    with structlog.contextvars.bound_contextvars(runId=run_id, stepId=step_id):
        return _execute(run_id, step_id, ports, settings, clocks)


def _execute(run_id: str, step_id: str, ports: Ports, settings: Settings, clocks: Clocks) -> StepReport:
    mode = ports.chart_api.mode
    log = get_logger().bind(chartsApi={"mode": mode})
    budget = Budget.starting_now(settings.step_budget_seconds, clocks)
    token = clocks.new_token()
    started_at = clocks.now()
    try:
        claim = ports.flow_runs.claim_step(
            run_id,
            step_id,
            token=token,
            now=started_at,
            lease_expires_at=started_at + timedelta(seconds=settings.request_timeout_seconds),
        )
    except TransientStoreError as exc:
        # The store confirmed no claim of ours (it re-reads after an outage), so a redelivery
        # is safe and is the only way to get the work done.
        log.error("claim failed", error={"code": ErrorCode.FIRESTORE_CLAIM_FAILED.value, "message": str(exc)})
        raise RedeliverEvent(f"claim of {step_id} could not reach the store: {exc}") from exc

    if claim.status is not ClaimStatus.CLAIMED or claim.flow_run is None:
        code = (
            ErrorCode.FLOW_RUN_NOT_FOUND
            if claim.status is ClaimStatus.NOT_FOUND
            else ErrorCode.STEP_CLAIM_CONFLICT
        )
        log.info("claim not taken: no-op", code=code.value, reason=claim.reason)
        return StepReport(run_id, step_id, "NOOP", mode, error_code=code.value, message=claim.reason)
    attempt = claim.claim.attempt if claim.claim else None
    log.info("claim succeeded", attempt=attempt, flowKey=claim.flow_run.get("flowKey"))

    try:
        final, report = _run_claimed(claim.flow_run, run_id, step_id, ports, settings, clocks, budget, log)
    except BaseException as exc:
        # A defect, an unexpected failure or an interrupt (Ctrl-C, shutdown): stop what is
        # still running, record it on the step, then let the caller see it.
        budget.cancel()
        log.exception("step crashed", error={"code": ErrorCode.WORKER_INTERNAL_ERROR.value})
        crash = StepError(
            ErrorCode.WORKER_INTERNAL_ERROR,
            f"the worker failed unexpectedly: {type(exc).__name__}: {str(exc)[:300]}".rstrip(": "),
            {"exception": type(exc).__name__},
        )
        _finalize(
            ports,
            run_id,
            step_id,
            token,
            StepFinal(StepStatus.FAILED, clocks.now(), error=crash),
            settings,
            clocks,
            log,
        )
        raise

    written = _finalize(ports, run_id, step_id, token, final, settings, clocks, log)
    log.info(
        "step completed",
        status=final.status.value,
        error={"code": final.error.code.value, "message": final.error.message} if final.error else None,
        itemsCount=report.items_count,
        failuresCount=report.failures_count,
        minImages=report.min_images,
        outputsManifestGcsUri=report.manifest_uri,
        finalized=written,
    )
    return replace(report, finalized=written)


def _run_claimed(
    flow_run: dict[str, Any],
    run_id: str,
    step_id: str,
    ports: Ports,
    settings: Settings,
    clocks: Clocks,
    budget: Budget,
    log: Any,
) -> tuple[StepFinal, StepReport]:
    mode = ports.chart_api.mode
    step = steps_of(flow_run).get(step_id) or {}
    try:
        templates = ports.templates.get_templates(requested_template_ids(step))
    except TransientStoreError as exc:
        error = StepError(ErrorCode.FIRESTORE_UNAVAILABLE, f"chart templates could not be read: {exc}")
        return _failed(run_id, step_id, mode, error, clocks)

    validated = validate_step(
        flow_run, run_id, step_id, templates, default_timezone=settings.charts_default_timezone
    )
    if isinstance(validated, StepError):
        log.warning("step inputs invalid", error=validated.to_dict())
        return _failed(run_id, step_id, mode, validated, clocks)

    # Charts may not eat the time the manifest write needs: without a manifest the step fails.
    manifest_reserve = min(MANIFEST_RESERVE_SECONDS, settings.step_budget_seconds * 0.2)
    rendered = _render_all(validated, ports, settings, clocks, budget.ending_earlier(manifest_reserve), log)
    manifest = build_manifest(
        run_id=run_id,
        step_id=step_id,
        symbol=validated.symbol,
        timeframe=validated.timeframe,
        min_images=validated.min_images,
        requested=validated.requests,
        items=rendered.items,
        failures=rendered.failures,
        created_at=clocks.now(),
        charts_api_mode=mode,
    )
    counts = {
        "items_count": len(rendered.items),
        "failures_count": len(rendered.failures),
        "min_images": validated.min_images,
    }
    try:
        manifest_uri = ports.artifacts.put_manifest(
            manifest_object_path(run_id, step_id), manifest_bytes(manifest)
        )
    except ArtifactWriteError as exc:
        # Without a manifest downstream has nothing to read: the step cannot be SUCCEEDED.
        error = StepError(
            ErrorCode.MANIFEST_WRITE_FAILED, f"manifest could not be written: {exc}", counts_details(counts)
        )
        log.error("manifest write failed", error=error.to_dict())
        final, report = _failed(run_id, step_id, mode, error, clocks)
        return final, replace(report, **counts)
    log.info("manifest written", gcsUri=manifest_uri, **counts_details(counts))

    status = step_status(len(rendered.items), validated.min_images)
    error = None
    if status is StepStatus.FAILED:
        error = insufficient_images_error(
            len(rendered.items),
            validated.min_images,
            len(validated.requests),
            [f.error.code for f in rendered.failures],
        )
    final = StepFinal(status, clocks.now(), outputs={"outputsManifestGcsUri": manifest_uri}, error=error)
    report = StepReport(
        run_id,
        step_id,
        status.value,
        mode,
        error_code=error.code.value if error else None,
        message=error.message if error else "",
        manifest_uri=manifest_uri,
        **counts,
    )
    return final, report


def counts_details(counts: dict[str, Any]) -> dict[str, Any]:
    return {
        "itemsCount": counts["items_count"],
        "failuresCount": counts["failures_count"],
        "minImages": counts["min_images"],
    }


def _failed(
    run_id: str, step_id: str, mode: str, error: StepError, clocks: Clocks
) -> tuple[StepFinal, StepReport]:
    final = StepFinal(StepStatus.FAILED, clocks.now(), error=error)
    return final, StepReport(
        run_id, step_id, "FAILED", mode, error_code=error.code.value, message=error.message
    )


def _render_all(
    validated: ValidatedStep, ports: Ports, settings: Settings, clocks: Clocks, budget: Budget, log: Any
) -> _Rendered:
    """All requests concurrently (bounded), each yielding one item or one failure."""
    rendered = _Rendered()
    requests = {r["chartTemplateId"]: r for r in validated.requests}
    workers = min(settings.chart_concurrency, len(validated.calls))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chart")
    try:
        futures: dict[Future[ManifestItem | ManifestFailure], ChartCall] = {
            pool.submit(
                contextvars.copy_context().run,
                _render_one,
                call,
                requests[call.chart_template_id],
                validated,
                ports,
                clocks,
                budget,
                log,
            ): call
            for call in validated.calls
        }
        done, not_done = wait(futures, timeout=budget.remaining())
        for future in done:
            outcome = future.result()
            (rendered.items if isinstance(outcome, ManifestItem) else rendered.failures).append(outcome)  # type: ignore[arg-type]
        for future in not_done:
            call = futures[future]
            future.cancel()
            error = StepError(
                ErrorCode.CHART_API_FAILED,
                f"the step's time budget ({settings.step_budget_seconds:.0f}s) ran out before "
                f"{call.chart_template_id} was rendered",
                {"reason": "STEP_BUDGET_EXHAUSTED", "fixtureKey": call.fixture_key},
            )
            log.warning("chart abandoned: step budget exhausted", chartTemplateId=call.chart_template_id)
            rendered.failures.append(ManifestFailure(requests[call.chart_template_id], error))
    finally:
        # Late calls may still finish in the background; their PNGs are simply not listed.
        pool.shutdown(wait=False, cancel_futures=True)
    return rendered


def _render_one(
    call: ChartCall,
    request: dict[str, Any],
    validated: ValidatedStep,
    ports: Ports,
    clocks: Clocks,
    budget: Budget,
    log: Any,
) -> ManifestItem | ManifestFailure:
    call_log = log.bind(
        chartTemplateId=call.chart_template_id,
        chartsApi={"mode": ports.chart_api.mode, "fixtureKey": call.fixture_key},
    )
    call_log.info("chart api call started", symbol=call.chart_img_symbol, interval=call.interval)
    began = clocks.monotonic()
    result = ports.chart_api.render(call, budget)
    duration_ms = round((clocks.monotonic() - began) * 1000, 1)
    if isinstance(result, ChartFailure):
        call_log.warning(
            "chart api call finished", status="failed", durationMs=duration_ms, error=result.error.to_dict()
        )
        return ManifestFailure(request, result.error)
    call_log.info(
        "chart api call finished", status="succeeded", durationMs=duration_ms, bytes=len(result.png)
    )

    generated_at = clocks.now()
    path = png_object_path(
        call.run_id, call.step_id, generated_at, call.chart_img_symbol, call.interval, call.chart_template_id
    )
    try:
        uri = ports.artifacts.create_png(path, result.png)
    except ArtifactWriteError as exc:
        error = StepError(
            ErrorCode.GCS_WRITE_FAILED, f"PNG could not be written: {exc}", {"objectPath": path}
        )
        call_log.error("png write failed", error=error.to_dict())
        return ManifestFailure(request, error)
    template = validated.templates[call.chart_template_id]
    return ManifestItem(
        call.chart_template_id, str(template["description"]), generated_at, uri, call.chart_img_symbol
    )


def _finalize(
    ports: Ports,
    run_id: str,
    step_id: str,
    token: str,
    final: StepFinal,
    settings: Settings,
    clocks: Clocks,
    log: Any,
) -> bool:
    """Retries transient store errors within the finalize budget; raises FinalizeFailed after it."""
    budget = Budget.starting_now(settings.finalize_budget_seconds, clocks)

    def out_of_budget(state: RetryCallState) -> bool:
        return budget.expired()

    def note_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("finalize retrying", attempt=state.attempt_number, reason=str(exc))

    retrying = Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        stop=out_of_budget,
        wait=wait_exponential_jitter(multiplier=0.2, max=5.0),
        sleep=clocks.sleep,
        before_sleep=note_retry,
        reraise=True,
    )
    try:
        outcome = retrying(ports.flow_runs.finalize_step, run_id, step_id, token=token, final=final)
    except TransientStoreError as exc:
        log.error(
            "finalize failed",
            error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": str(exc)},
            intendedStatus=final.status.value,
        )
        raise FinalizeFailed(
            f"step {step_id} could not be finalized within {settings.finalize_budget_seconds:.0f}s: {exc}"
        ) from exc
    except Exception as exc:
        # The store refused this result itself (a document grown too large, a field of the
        # wrong shape...): record the bare failure instead, so the step does not stay RUNNING.
        outcome = _finalize_bare_failure(ports, run_id, step_id, token, final, clocks, log, exc)
    if not outcome.written:
        log.info(
            "finalize skipped: no-op", code=ErrorCode.STEP_FINALIZE_CONFLICT.value, reason=outcome.reason
        )
    return outcome.written


def _finalize_bare_failure(
    ports: Ports,
    run_id: str,
    step_id: str,
    token: str,
    refused: StepFinal,
    clocks: Clocks,
    log: Any,
    cause: Exception,
) -> Any:
    reason = f"{type(cause).__name__}: {str(cause)[:300]}"
    log.error(
        "finalize refused: recording a bare failure instead",
        error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason},
        intendedStatus=refused.status.value,
    )
    bare = StepFinal(
        StepStatus.FAILED,
        clocks.now(),
        error=StepError(
            ErrorCode.FIRESTORE_FINALIZE_FAILED,
            f"the step's result ({refused.status.value}"
            + (f", {refused.error.code.value}" if refused.error else "")
            + f") could not be recorded: {reason}",
        ),
    )
    try:
        return ports.flow_runs.finalize_step(run_id, step_id, token=token, final=bare)
    except Exception as exc:
        log.error(
            "finalize failed", error={"code": ErrorCode.FIRESTORE_FINALIZE_FAILED.value, "message": reason}
        )
        raise FinalizeFailed(f"step {step_id} could not be finalized: {reason}") from exc
