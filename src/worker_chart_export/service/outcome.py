"""What a claimed step comes to once its charts are rendered: its manifest written (retried
within the budget after the fence said the claim holds), then the verdict of
core/step/patience.py as the StepFinal the finalize records: SUCCEEDED, FAILED, or a step
that waits out a bad window."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker_chart_export import known_keys
from worker_chart_export.core.exceptions import (
    ArtifactWriteError,
    ClaimSuperseded,
    RedeliverEvent,
    TransientStoreError,
)
from worker_chart_export.core.naming import manifest_object_path
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
    waits_of,
)
from worker_chart_export.core.step.step_rules import lease_surely_held
from worker_chart_export.core.step.validation import ValidatedStep
from worker_chart_export.core.types import Claim, StepFinal, StepStatus
from worker_chart_export.service.artifact_writes import write_patiently
from worker_chart_export.service.render import RenderedCharts
from worker_chart_export.service.step_context import StepContext, StepReport

if TYPE_CHECKING:
    from worker_chart_export.core.documents import StepDocument, StepOutputs


def _still_ours(ctx: StepContext, claim: Claim | None) -> bool:
    """The fence before the manifest: inside the lease no reaper can have taken the step
    back, so only a late execution (or a claim without its lease) reads the run document."""
    if claim is not None and lease_surely_held(claim.lease_expires_at, ctx.clock.now()):
        return True
    return ctx.ports.flow_runs.claim_is_current(ctx.run_id, ctx.step_id, ctx.token)


def write_manifest_and_decide(
    ctx: StepContext,
    validated: ValidatedStep,
    rendered: RenderedCharts,
    claim: Claim | None,
    step: StepDocument | None,
) -> StepReport:
    counts = {  # what the report and a manifest-write failure carry
        "items_count": len(rendered.items),
        "failures_count": len(rendered.failures),
        "min_images": validated.min_images,
    }
    attempt = _attempt(ctx, claim, step)
    try:
        manifest_uri = _put_manifest(ctx, _manifest_of(ctx, validated, rendered), claim)
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
        return ctx.report(_final(ctx, after_bad_moment(write_error, attempt), {}), **counts)
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
        attempt=attempt,
    )
    return ctx.report(_final(ctx, verdict, {"outputsManifestGcsUri": manifest_uri}), **counts)


def _manifest_of(ctx: StepContext, validated: ValidatedStep, rendered: RenderedCharts) -> dict[str, Any]:
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
    return build_manifest(header, rendered.items, failures, created_at=ctx.clock.now())


def _put_manifest(ctx: StepContext, manifest: dict[str, Any], claim: Claim | None) -> str:
    """The manifest written under the fence, a transient failure tried again in the budget."""
    return write_patiently(
        ctx,
        ctx.budget,
        lambda: ctx.ports.artifacts.put_manifest(
            manifest_object_path(ctx.run_id, ctx.step_id),
            manifest_bytes(manifest),
            still_ours=lambda: _still_ours(ctx, claim),
        ),
        what="manifest",
    )


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
