"""Before a step renders: the charts an earlier execution of it already wrote, listed again
instead of paid for twice. One listing of the step's folder, only when one may find
something; which PNGs qualify is core/reuse.py's rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker_chart_export.core.exceptions import ArtifactListError
from worker_chart_export.core.manifest import ManifestItem
from worker_chart_export.core.naming import gcs_uri, rfc3339_utc
from worker_chart_export.core.reuse import (
    ReusablePng,
    choose_reusable,
    listing_prefix,
    listing_start,
    should_look,
)
from worker_chart_export.core.types import ChartCall
from worker_chart_export.core.validation import ValidatedStep
from worker_chart_export.service.step_context import StepContext


@dataclass(frozen=True)
class Reuse:
    items: list[ManifestItem]  # the charts an earlier execution wrote, as manifest items
    to_render: list[ChartCall]  # the others, in the step's order


def reuse_earlier_charts(
    ctx: StepContext, validated: ValidatedStep, attempt: int | None, step: Mapping[str, Any]
) -> Reuse:
    """`attempt`: the claim's; `step`: the step as the claim returned it. A reused chart
    keeps its own URI and generatedAt, costs no quota and no call, and is said once in the
    log ("chart reused") and in its item (`meta.reused`)."""
    calls = validated.calls
    found = _look(ctx, calls, attempt, step)
    items = []
    for call in calls:
        png = found.get(call.chart_template_id)
        if png is None:
            continue
        uri = gcs_uri(ctx.ports.artifacts.bucket, png.object_path)
        ctx.log.info(
            "chart reused",
            chartTemplateId=call.chart_template_id,
            gcsUri=uri,
            generatedAt=rfc3339_utc(png.generated_at),
            ageSeconds=round(png.age_seconds, 3),
        )
        description = str(validated.templates[call.chart_template_id]["description"])
        items.append(
            ManifestItem(
                call.chart_template_id, description, png.generated_at, uri, call.chart_img_symbol, reused=True
            )
        )
    return Reuse(items, [c for c in calls if c.chart_template_id not in found])


def _look(
    ctx: StepContext, calls: Sequence[ChartCall], attempt: int | None, step: Mapping[str, Any]
) -> dict[str, ReusablePng]:
    max_age = ctx.limits.chart_reuse_max_age_seconds
    if not calls or not should_look(max_age, attempt, step):
        return {}
    now = ctx.clock.now()
    try:
        listed = ctx.ports.artifacts.list_objects(
            listing_prefix(ctx.run_id, ctx.step_id),
            start_offset=listing_start(ctx.run_id, ctx.step_id, now, max_age),
        )
    except ArtifactListError as exc:
        # only a saving missed: the charts are rendered as they would have been without it
        ctx.log.warning("earlier charts not listed: rendering every chart", error={"message": str(exc)})
        return {}
    return choose_reusable(listed, calls, now=now, max_age_seconds=max_age)
