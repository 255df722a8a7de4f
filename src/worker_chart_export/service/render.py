"""Rendering a validated step's charts: the ones an earlier execution did not leave
(service/reuse.py) concurrently, within the step's budget, inside the step's own chart
session; each yields one manifest item or one failure."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import ArtifactWriteError
from worker_chart_export.core.naming import png_object_path
from worker_chart_export.core.step import step_failures
from worker_chart_export.core.step.manifest import ManifestFailure, ManifestItem
from worker_chart_export.core.step.reuse import png_metadata
from worker_chart_export.core.step.validation import ValidatedStep
from worker_chart_export.core.templates.chart_request import body_digest
from worker_chart_export.core.types import ChartCall, ChartFailure
from worker_chart_export.service.artifact_writes import write_patiently
from worker_chart_export.service.ports import ChartSession
from worker_chart_export.service.reuse import Reuse
from worker_chart_export.service.step_context import StepContext

if TYPE_CHECKING:
    from worker_chart_export.core.documents import ChartRequestInput


ChartFuture: TypeAlias = Future[ManifestItem | ManifestFailure]


@dataclass
class RenderedCharts:
    items: list[ManifestItem] = field(default_factory=list)
    failures: list[ManifestFailure] = field(default_factory=list)


def render_charts(ctx: StepContext, validated: ValidatedStep, reuse: Reuse) -> RenderedCharts:
    """The charts not reused, concurrently (bounded), each yielding one item or one failure."""
    if not reuse.to_render:
        return RenderedCharts(items=list(reuse.items))  # no chart session: nothing reserved, nothing sent
    # Charts may not eat the time the manifest write needs: without a manifest the step fails.
    budget = ctx.budget.ending_earlier(ctx.limits.charts_reserve_seconds)
    # the step's own chart session: its first wave's quota in one round trip, not one per chart
    with ctx.ports.chart_api.for_step(reuse.to_render[: ctx.limits.chart_concurrency], budget) as charts:
        return _render_in_pool(ctx, charts, validated, reuse, budget)


def _render_in_pool(
    ctx: StepContext, charts: ChartSession, validated: ValidatedStep, reuse: Reuse, budget: Budget
) -> RenderedCharts:
    rendered = RenderedCharts(items=list(reuse.items))
    requests = {r["chartTemplateId"]: r for r in validated.requests}
    workers = min(ctx.limits.chart_concurrency, len(reuse.to_render))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chart")
    try:
        futures: dict[ChartFuture, ChartCall] = {
            pool.submit(
                contextvars.copy_context().run,
                _render_one,
                ctx,
                budget,
                charts,
                call,
                requests[call.chart_template_id],
                validated.templates,
            ): call
            for call in reuse.to_render
        }
        done, not_done = _wait_within(budget, set(futures))
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


# How long one wait for the charts lasts before the budget is read again: a timeout read once
# is wall time, and would be waited out whatever the budget's own clock (a test's) says.
BUDGET_READ_EVERY_SECONDS = 0.05


def _wait_within(budget: Budget, futures: set[ChartFuture]) -> tuple[set[ChartFuture], set[ChartFuture]]:
    """(done, not done) once every chart is done or the budget is spent, as its clock says."""
    while True:
        done, not_done = wait(futures, timeout=min(budget.remaining(), BUDGET_READ_EVERY_SECONDS))
        if not not_done or budget.expired():
            return done, not_done


def _render_one(
    ctx: StepContext,
    budget: Budget,
    charts: ChartSession,
    call: ChartCall,
    request: ChartRequestInput,
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
    digest = body_digest(call.body)  # of the body sent: a retry reuses this PNG for it alone
    try:
        uri = write_patiently(
            ctx,
            budget,
            lambda: ctx.ports.artifacts.create_png(
                path, result.png, metadata=png_metadata(digest, ctx.token)
            ),
            what=path,
        )
    except ArtifactWriteError as exc:
        error = step_failures.png_write_failed(exc, path)
        log.error("png write failed", error=error.to_dict())
        return ManifestFailure(request, error)
    description = str(templates[call.chart_template_id]["description"])
    return ManifestItem(call.chart_template_id, description, generated_at, uri, call.chart_img_symbol, digest)
