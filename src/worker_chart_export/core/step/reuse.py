"""Never pay twice: which PNGs an earlier execution of the same step left that this one
lists again instead of asking CHART-IMG for them (error model, "Partial failures": the next
invocation detects the existing artifact and does not call the external API again), and
never reuse anything but the very request.

An earlier execution that died (its lease reaped) may have written some of its PNGs. Each
PNG carries, as object metadata, the digest of the exact body that was sent for it
(`chart_request.body_digest`) and the claim token of the execution that wrote it
(`png_metadata`). A listed PNG stands for a chart when its name (`naming.parse_png_object_path`)
says it is this step's PNG of that chart, it was generated at most `max_age_seconds` ago
(never in the future), its content type is image/png, and its digest is the digest of the
body this execution would send now; then its bytes must be a whole PNG (core/png.py, the check
a fresh answer passes too; made by the caller on the newest such PNG first). A name is not an identity:
a template edited meanwhile, another symbol whose slug collides, an object planted under a
PNG's name all fail one of these and the chart is rendered anew.
Pure: the listing and the reading are the caller's (one listing, `should_look` first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from worker_chart_export.core.naming import compact_utc, parse_png_object_path, step_prefix
from worker_chart_export.core.templates.chart_request import body_digest
from worker_chart_export.core.types import ChartCall, ListedObject

if TYPE_CHECKING:
    from worker_chart_export.core.documents import StepDocument

# CHART_REUSE_MAX_AGE_SECONDS' default. A crashed step comes back after its lease
# (REQUEST_TIMEOUT_SECONDS, 300 s by default) and the reaper's next pass; a step a bad window
# held back comes back after its waits (core.retry.STEP_ATTEMPTS: 15 min in all over 5
# attempts, each attempt up to a request's timeout): an hour still finds the PNGs its first
# attempt paid for at its last, and a chart drawn then is as close to when the step was asked
# about the market as one drawn anew.
DEFAULT_MAX_AGE_SECONDS = 3600.0
MAX_AGE_LIMIT_SECONDS = 86_400.0  # a day: the setting's upper bound
# The one listing's page, at most (GCS's own largest page): a step's folder holds one PNG
# per chart (100 at most) per execution, and its manifest.
LIST_PAGE_SIZE = 1000

PNG_CONTENT_TYPE = "image/png"
# The most of a stored PNG read to check it whole: a chart at a plan's largest resolution
# is far below it; a bigger object is cut here and so refused.
MAX_PNG_BYTES = 32 * 1024 * 1024
# The object metadata every PNG is written with (GCS custom metadata; beside the file locally)
REQUEST_DIGEST_METADATA = "requestDigest"
CLAIM_TOKEN_METADATA = "claimToken"


class ReuseRefusal(StrEnum):
    """Why a listed PNG of a chart is not reused (the chart is then rendered anew)."""

    NOT_IMAGE_PNG = "its content type is not image/png"
    NO_DIGEST = "it carries no request digest"
    OTHER_REQUEST = "it was rendered from another request body"
    NOT_PNG_BYTES = "its bytes are not a whole PNG"
    UNREADABLE = "its bytes could not be read"


@dataclass(frozen=True)
class Candidate:
    """A listed PNG of one chart within the window, with what its listing already says
    against it (`refusal`; None: only its bytes are left to check)."""

    object_path: str
    generated_at: datetime
    age_seconds: float
    refusal: ReuseRefusal | None = None


def png_metadata(request_digest: str, claim_token: str) -> dict[str, str]:
    """What a PNG is written with: the digest of the body sent for it, and who wrote it."""
    return {REQUEST_DIGEST_METADATA: request_digest, CLAIM_TOKEN_METADATA: claim_token}


def should_look(max_age_seconds: float, attempt: int | None, step: StepDocument | None) -> bool:
    """Whether listing the step's folder may find anything, known without a call: reuse is
    on, and an earlier execution may have written PNGs there: the claim is not the step's
    first (a reaped or retried execution), or the step already names a manifest (it ran to
    the end once and was made READY again)."""
    if max_age_seconds <= 0:
        return False
    if attempt is not None and attempt > 1:
        return True
    outputs = step.get("outputs") if step is not None else None
    return isinstance(outputs, Mapping) and bool(outputs.get("outputsManifestGcsUri"))


def listing_prefix(run_id: str, step_id: str) -> str:
    """`charts/<runId>/<stepId>/`: the one folder a step writes in."""
    return step_prefix(run_id, step_id) + "/"


def listing_start(run_id: str, step_id: str, now: datetime, max_age_seconds: float) -> str:
    """The first object name that may qualify: PNG names begin with their moment, which
    sorts as time does, so a listing from here skips what is too old (the cut is truncated
    to the millisecond: it never skips a PNG `reuse_candidates` would take)."""
    oldest = now - timedelta(seconds=max_age_seconds)
    return listing_prefix(run_id, step_id) + compact_utc(oldest)


def reuse_candidates(
    listed: Iterable[ListedObject],
    calls: Sequence[ChartCall],
    *,
    now: datetime,
    max_age_seconds: float,
) -> dict[str, list[Candidate]]:
    """For each call (by chartTemplateId) its step's listed PNGs generated within the window
    (0 <= age <= max_age_seconds), newest first, each with the listing's verdict: refused for
    its content type, a missing digest or another request's digest, or left for its bytes to
    decide. Names that are not this step's PNGs of a requested chart are ignored."""
    if max_age_seconds <= 0:
        return {}
    wanted = {(c.run_id, c.step_id, c.chart_template_id): c for c in calls}
    digests = {c.chart_template_id: body_digest(c.body) for c in calls}
    found: dict[str, list[Candidate]] = {}
    for listed_object in listed:
        try:
            name = parse_png_object_path(listed_object.name)
        except ValueError:
            continue
        call = wanted.get((name.run_id, name.step_id, name.chart_template_id))
        age = (now - name.generated_at).total_seconds()
        if call is None or not 0 <= age <= max_age_seconds:
            continue
        refusal = listing_refusal(listed_object, digests[call.chart_template_id])
        found.setdefault(call.chart_template_id, []).append(
            Candidate(listed_object.name, name.generated_at, age, refusal)
        )
    for listed_pngs in found.values():
        listed_pngs.sort(key=lambda c: (c.generated_at, c.object_path), reverse=True)
    return found


def listing_refusal(listed_object: ListedObject, request_digest: str) -> ReuseRefusal | None:
    """What the listing alone says against reusing this object for a body of `request_digest`."""
    if listed_object.content_type != PNG_CONTENT_TYPE:
        return ReuseRefusal.NOT_IMAGE_PNG
    stored = listed_object.metadata.get(REQUEST_DIGEST_METADATA)
    if not stored:
        return ReuseRefusal.NO_DIGEST
    return None if stored == request_digest else ReuseRefusal.OTHER_REQUEST
