"""The ports: small protocols the step execution talks to. Each has a real and a local adapter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from worker_chart_export.core.budget import Budget
from worker_chart_export.core.step.step_rules import RunVersion
from worker_chart_export.core.templates.template_check import StoredTemplate
from worker_chart_export.core.types import (
    ChartCall,
    ChartResult,
    ClaimResult,
    FinalizeResult,
    ListedObject,
    StepFinal,
)


class FlowRunStore(Protocol):
    """flow_runs/{runId}: Firestore in production, a JSON file locally."""

    def claim_step(
        self,
        run_id: str,
        step_id: str,
        *,
        token: str,
        now: datetime,
        lease_expires_at: datetime,
        seen: RunVersion | None = None,
    ) -> ClaimResult:
        """READY -> RUNNING atomically, with the step's lease; holds no lock on the run.

        `seen`: the version of the run the caller saw (an event's), which the claim may be
        planned from; without it the store reads first. A step not (or no longer) READY is
        a refusal (CONFLICT / NOT_FOUND), returned as it is.
        Raises ClaimContended when the step is still READY after the claim's tries (other
        writes of the run kept coming first); raises TransientStoreError when the store is
        unavailable and no claim of ours landed.
        """
        ...

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        """RUNNING(with our token) -> SUCCEEDED/FAILED; otherwise a no-op (written=False).

        Raises TransientStoreError on errors worth retrying.
        """
        ...

    def claim_is_current(self, run_id: str, step_id: str, token: str) -> bool:
        """The step is still RUNNING under our claim: the fence before the manifest write.

        Raises TransientStoreError when the store cannot be read.
        """
        ...


class TemplateSource(Protocol):
    """chart_templates/{id}: Firestore in production, the chart-templates/ directory locally."""

    def get_templates(self, template_ids: Sequence[str]) -> Mapping[str, StoredTemplate]:
        """Templates by id; ids that do not exist are absent from the result. A version
        already returned comes back as the same StoredTemplate, so its check is not redone.

        Raises TransientStoreError when the store cannot be read.
        """
        ...


class ArtifactStore(Protocol):
    """The charts bucket: GCS in production, a local folder mirroring the bucket locally."""

    bucket: str

    def check_bucket(self) -> None:
        """The bucket exists and answers us: one request (a listing of at most one name),
        asked before a step is claimed, so nothing is paid for that could not be stored.

        Raises BucketUnusable naming the bucket (missing, refused, or unreachable after
        bounded retries).
        """
        ...

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        """Create-only write (ifGenerationMatch=0) of image/png, with `metadata` as the
        object's own (core.step.reuse.png_metadata: the digest of the body it was rendered from,
        the claim that wrote it). Returns the gs:// URI.

        Raises ArtifactWriteError after bounded retries; BucketUnusable when the bucket is gone.
        """
        ...

    def list_objects(self, prefix: str, *, start_offset: str = "") -> list[ListedObject]:
        """The objects under `prefix` (a folder, ending in `/`), in name order, from
        `start_offset` on (names before it are skipped), each with its content type and
        metadata: at most one page, the adapter's LIST_PAGE_SIZE, so never more than one
        round trip, and no object is read.

        Raises ArtifactListError after bounded retries; BucketUnusable when the bucket is gone.
        """
        ...

    def read_head(self, object_path: str, size: int) -> bytes:
        """The object's first `size` bytes (all of them when it is shorter): one ranged read.

        Raises ArtifactReadError after bounded retries (an object gone meanwhile too).
        """
        ...

    def put_manifest(
        self, object_path: str, data: bytes, *, still_ours: Callable[[], bool] | None = None
    ) -> str:
        """Overwriting write of application/json. Returns the gs:// URI.

        With `still_ours`, the write happens only while it answers True, and never over a
        version written after it was asked (a reaped execution that finishes late must not
        replace the newer execution's manifest): raises ClaimSuperseded otherwise.
        Raises ArtifactWriteError after bounded retries; BucketUnusable when the bucket is gone.
        """
        ...


class ChartSession(Protocol):
    """One step's renders, within the budget its session was opened with (ChartApi.for_step).
    Used from several threads at once."""

    def render(self, call: ChartCall) -> ChartResult:
        """Never raises for API-level failures: they come back as ChartFailure."""
        ...


class ChartApi(Protocol):
    """Renders chart requests: real HTTP, fixtures (mock) or record/replay."""

    mode: str

    def for_step(
        self, first_wave: Sequence[ChartCall], budget: Budget
    ) -> AbstractContextManager[ChartSession]:
        """A step's own session around its renders, gone when the block ends: what the
        first attempts of `first_wave` need is reserved at once on entering (one round trip
        for all), if the adapter reserves anything; the renders inside use it, and what they
        did not use is dropped on leaving. Nothing of it is shared with another session,
        even one of the same step. An unreachable store is no error here: the calls then
        reserve one by one."""
        ...


@dataclass(frozen=True)
class Ports:
    flow_runs: FlowRunStore
    templates: TemplateSource
    artifacts: ArtifactStore
    chart_api: ChartApi
