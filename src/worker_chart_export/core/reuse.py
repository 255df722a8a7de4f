"""Never pay twice: which PNGs an earlier execution of the same step left that this one
lists again instead of asking CHART-IMG for them (error model, "Partial failures": the next
invocation detects the existing artifact and does not call the external API again).

An earlier execution that died (its lease reaped) may have written some of its PNGs; their
names say what they are (`naming.parse_png_object_path`). A PNG is reused for a chart when
its runId, stepId, chartTemplateId, symbol slug and timeframe are the ones this execution
would write, and it was generated at most `max_age_seconds` ago (never in the future); of
several, the newest. Pure: the listing is the caller's (one call, `should_look` first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from worker_chart_export.core.naming import compact_utc, parse_png_object_path, step_prefix, symbol_slug
from worker_chart_export.core.types import ChartCall

# CHART_REUSE_MAX_AGE_SECONDS' default. A crashed step comes back after its lease
# (REQUEST_TIMEOUT_SECONDS, 300 s by default) and the reaper's next pass (every 5 min as
# deployed): 15 min still finds the PNGs of a step that died early, and is young enough for
# the charts to show the market as the step was asked about it.
DEFAULT_MAX_AGE_SECONDS = 900.0
MAX_AGE_LIMIT_SECONDS = 86_400.0  # a day: the setting's upper bound
# The one listing's page, at most (GCS's own largest page): a step's folder holds one PNG
# per chart (100 at most) per execution, and its manifest.
LIST_PAGE_SIZE = 1000


@dataclass(frozen=True)
class ReusablePng:
    object_path: str
    generated_at: datetime
    age_seconds: float


def should_look(max_age_seconds: float, attempt: int | None, step: Mapping[str, Any] | None) -> bool:
    """Whether listing the step's folder may find anything, known without a call: reuse is
    on, and an earlier execution may have written PNGs there: the claim is not the step's
    first (a reaped or retried execution), or the step already names a manifest (it ran to
    the end once and was made READY again)."""
    if max_age_seconds <= 0:
        return False
    if attempt is not None and attempt > 1:
        return True
    outputs = (step or {}).get("outputs")
    return isinstance(outputs, Mapping) and bool(outputs.get("outputsManifestGcsUri"))


def listing_prefix(run_id: str, step_id: str) -> str:
    """`charts/<runId>/<stepId>/`: the one folder a step writes in."""
    return step_prefix(run_id, step_id) + "/"


def listing_start(run_id: str, step_id: str, now: datetime, max_age_seconds: float) -> str:
    """The first object name that may qualify: PNG names begin with their moment, which
    sorts as time does, so a listing from here skips what is too old (the cut is truncated
    to the millisecond: it never skips a PNG `choose_reusable` would take)."""
    oldest = now - timedelta(seconds=max_age_seconds)
    return listing_prefix(run_id, step_id) + compact_utc(oldest)


def choose_reusable(
    object_paths: Iterable[str],
    calls: Sequence[ChartCall],
    *,
    now: datetime,
    max_age_seconds: float,
) -> dict[str, ReusablePng]:
    """For each call (by chartTemplateId) the newest listed PNG of the same chart generated
    within the window: 0 <= age <= max_age_seconds. Names that do not parse are ignored."""
    if max_age_seconds <= 0:
        return {}
    wanted = {
        (c.run_id, c.step_id, c.chart_template_id, symbol_slug(c.chart_img_symbol), c.interval): c
        for c in calls
    }
    chosen: dict[str, ReusablePng] = {}
    for path in object_paths:
        try:
            name = parse_png_object_path(path)
        except ValueError:
            continue
        key = (name.run_id, name.step_id, name.chart_template_id, name.symbol_slug, name.timeframe)
        call = wanted.get(key)
        age = (now - name.generated_at).total_seconds()
        if call is None or not 0 <= age <= max_age_seconds:
            continue
        best = chosen.get(call.chart_template_id)
        if best is None or name.generated_at > best.generated_at:
            chosen[call.chart_template_id] = ReusablePng(path, name.generated_at, age)
    return chosen
