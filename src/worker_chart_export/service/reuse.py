"""Before a step renders: the charts an earlier execution of it already wrote, listed again
instead of paid for twice, but only for the very request this execution would send. One
listing of the step's folder, only when one may find something, then one read of each PNG it
would reuse, checked whole as a fresh answer is (core/png.py); which PNGs qualify is
core/step/reuse.py's rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from worker_chart_export.core.exceptions import ArtifactListError, ArtifactReadError
from worker_chart_export.core.naming import gcs_uri, rfc3339_utc
from worker_chart_export.core.png import check_png
from worker_chart_export.core.step.manifest import ManifestItem
from worker_chart_export.core.step.reuse import (
    MAX_PNG_BYTES,
    Candidate,
    ReuseRefusal,
    listing_prefix,
    listing_start,
    reuse_candidates,
    should_look,
)
from worker_chart_export.core.step.validation import ValidatedStep
from worker_chart_export.core.templates.chart_request import body_digest
from worker_chart_export.core.types import ChartCall
from worker_chart_export.service.step_context import StepContext

if TYPE_CHECKING:
    from worker_chart_export.core.documents import StepDocument

# the skipped objects one WARNING names at most (a step has 100 charts at most)
MAX_SKIPPED_NAMED = 20


@dataclass(frozen=True)
class Reuse:
    items: list[ManifestItem]  # the charts an earlier execution wrote, as manifest items
    to_render: list[ChartCall]  # the others, in the step's order


@dataclass
class _Found:
    chosen: dict[str, Candidate] = field(default_factory=dict)  # by chartTemplateId
    skipped: list[tuple[str, Candidate, ReuseRefusal]] = field(default_factory=list)


def reuse_earlier_charts(
    ctx: StepContext, validated: ValidatedStep, attempt: int | None, step: StepDocument | None
) -> Reuse:
    """`attempt`: the claim's; `step`: the step as the claim returned it. A reused chart
    keeps its own URI and generatedAt, costs no quota and no call, and is said once in the
    log ("chart reused") and in its item (`meta.reused`). The PNGs of those charts that were
    looked at and refused are named in one WARNING; those charts are rendered anew."""
    calls = validated.calls
    found = _look(ctx, calls, attempt, step)
    _warn_skipped(ctx, found.skipped)
    items = []
    for call in calls:
        png = found.chosen.get(call.chart_template_id)
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
                call.chart_template_id,
                description,
                png.generated_at,
                uri,
                call.chart_img_symbol,
                request_digest=body_digest(call.body),
                reused=True,
            )
        )
    return Reuse(items, [c for c in calls if c.chart_template_id not in found.chosen])


def _look(
    ctx: StepContext, calls: Sequence[ChartCall], attempt: int | None, step: StepDocument | None
) -> _Found:
    max_age = ctx.limits.chart_reuse_max_age_seconds
    if not calls or not should_look(max_age, attempt, step):
        return _Found()
    now = ctx.clock.now()
    try:
        listed = ctx.ports.artifacts.list_objects(
            listing_prefix(ctx.run_id, ctx.step_id),
            start_offset=listing_start(ctx.run_id, ctx.step_id, now, max_age),
        )
    except ArtifactListError as exc:
        # only a saving missed: the charts are rendered as they would have been without it
        ctx.log.warning("earlier charts not listed: rendering every chart", error={"message": str(exc)})
        return _Found()
    found = _Found()
    for template_id, listed_pngs in reuse_candidates(listed, calls, now=now, max_age_seconds=max_age).items():
        for candidate in listed_pngs:  # newest first: the first that passes is reused
            refusal = candidate.refusal or _bytes_refusal(ctx, candidate.object_path)
            if refusal is None:
                found.chosen[template_id] = candidate
                break
            found.skipped.append((template_id, candidate, refusal))
    return found


def _bytes_refusal(ctx: StepContext, object_path: str) -> ReuseRefusal | None:
    try:
        stored = ctx.ports.artifacts.read_head(object_path, MAX_PNG_BYTES)
    except ArtifactReadError:
        return ReuseRefusal.UNREADABLE
    return None if check_png(stored).whole else ReuseRefusal.NOT_PNG_BYTES


def _warn_skipped(ctx: StepContext, skipped: Sequence[tuple[str, Candidate, ReuseRefusal]]) -> None:
    if not skipped:
        return
    ctx.log.warning(
        "earlier charts not reused: rendering them anew",
        skipped=[
            {
                "chartTemplateId": template_id,
                "gcsUri": gcs_uri(ctx.ports.artifacts.bucket, candidate.object_path),
                "reason": refusal.value,
            }
            for template_id, candidate, refusal in skipped[:MAX_SKIPPED_NAMED]
        ],
        skippedCount=len(skipped),
    )
