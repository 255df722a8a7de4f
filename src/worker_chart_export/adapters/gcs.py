"""The charts bucket on Cloud Storage: the production ArtifactStore.

PNG names carry `generatedAt`, so PNGs are create-only (`ifGenerationMatch=0`), each with the
digest of the request body it was rendered from and the claim token that wrote it as custom
metadata; the manifest path is fixed per step and is overwritten by the latest execution
(contract §9; docs/design.md, "Charts, artifacts and the outcome"), never by an execution whose
claim was taken back. A retried step lists its folder once, one page at most, names with their
content type and metadata, and reads the first bytes of a PNG it may reuse (core/step/reuse.py).
Each step first checks the bucket with a listing of one name (`check_bucket`); `serve` and the
warm-up write and delete an object of their own first (`probe_write`).
Retries are ours and bounded (tenacity, on the injected clock, by the policies bootstrap passes:
core/retry.py): the client library's own retry is switched off, since its default keeps
retrying for up to 120 s on its own schedule. A write request is made once here: the service
retries a transient write failure (`ArtifactWriteError.transient`) within the step's budget.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api_exceptions
from tenacity import Retrying, retry_if_exception

from worker_chart_export.adapters.gcs_errors import describe_error, is_transient
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.exceptions import (
    ArtifactListError,
    ArtifactReadError,
    ArtifactWriteError,
    BucketUnusable,
    ClaimSuperseded,
    StoreError,
)
from worker_chart_export.core.naming import CHARTS_PREFIX, gcs_uri
from worker_chart_export.core.retry import (
    ARTIFACT_WRITE_REQUEST,
    BUCKET_REQUESTS,
    MANIFEST_FENCE_TRIES,
    Backoff,
)
from worker_chart_export.core.step.reuse import LIST_PAGE_SIZE, PNG_CONTENT_TYPE
from worker_chart_export.core.types import ListedObject

if TYPE_CHECKING:
    from google.cloud.storage import Client as StorageClient

MANIFEST_CONTENT_TYPE = "application/json"
# The bucket is public-read (§13.6) and public objects default to a 1 h edge cache; the
# manifest is overwritten on re-execution, so readers must always revalidate it.
MANIFEST_CACHE_CONTROL = "no-cache"

# `probe_write`'s objects: created, then deleted at once (each name used once)
WRITE_PROBE_PREFIX = "worker-chart-export/write-probe/"


# google-cloud-storage 3.x fetches each bucket's metadata the first time it sees the bucket
# (a buckets.get in a background thread, with the library's own 120 s retry), only to label
# OpenTelemetry spans we do not export. Off unless the environment says otherwise.
DISABLE_BUCKET_METADATA_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def make_storage_client(project: str | None) -> StorageClient:
    """A Storage client for `project` (None: inferred from the credentials).

    With STORAGE_EMULATOR_HOST set (http://host:port, with the scheme) the library points at
    the emulator and goes anonymous by itself, so nothing here branches on the environment.
    """
    from google.cloud.storage import Client  # ~170 ms import: only paid when a step actually runs

    os.environ.setdefault(DISABLE_BUCKET_METADATA_ENV, "true")
    return Client(project=project)


class GcsArtifactStore:
    """ArtifactStore over one bucket. Safe to share across threads (one Blob per call).
    `requests`: how the bucket check, listings, reads and serve's write probe are retried;
    `writes`: how a PNG's or the manifest's write request is (once, by default: the service
    retries writes within the step's budget, core.retry.ARTIFACT_WRITES); `timeout`: each
    request's."""

    def __init__(
        self,
        client: StorageClient,
        bucket: str,
        *,
        requests: Backoff = BUCKET_REQUESTS,
        writes: Backoff = ARTIFACT_WRITE_REQUEST,
        timeout: float = 30.0,
        clock: Clock,
    ) -> None:
        self.bucket = bucket
        self._bucket = client.bucket(bucket)
        self._timeout = timeout
        self._requests = self._retrying(requests, clock)
        self._writes = self._retrying(writes, clock)

    @staticmethod
    def _retrying(policy: Backoff, clock: Clock) -> Retrying:
        # jittered, so concurrent writers that failed together do not retry together
        return Retrying(
            stop=policy.stop(),
            wait=policy.wait(),
            retry=retry_if_exception(is_transient),
            sleep=clock.sleep,
            reraise=True,
        )

    def check_bucket(self) -> None:
        def one_name() -> None:
            blobs = self._bucket.list_blobs(
                prefix=f"{CHARTS_PREFIX}/",
                max_results=1,
                fields="items(name)",
                retry=None,
                timeout=self._timeout,
            )
            list(blobs)  # the request is sent when the page is read

        self._retried(gcs_uri(self.bucket, ""), one_name, action="listing", failure=BucketUnusable)

    def probe_write(self) -> None:
        """What the worker does to its bucket, done once on a name of its own: a create-only
        write (a PNG's), then a delete (overwriting the manifest needs it). Raises
        BucketUnusable naming the bucket and what was refused."""
        path = f"{WRITE_PROBE_PREFIX}{uuid.uuid4().hex}"
        blob = self._bucket.blob(path)

        def create() -> None:
            blob.upload_from_string(b"", if_generation_match=0, retry=None, timeout=self._timeout)

        def delete() -> None:
            blob.delete(retry=None, timeout=self._timeout)

        self._retried(gcs_uri(self.bucket, path), create, action="writing", failure=BucketUnusable)
        self._retried(gcs_uri(self.bucket, path), delete, action="deleting", failure=BucketUnusable)

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        uri = gcs_uri(self.bucket, object_path)

        def upload() -> None:
            blob = self._bucket.blob(object_path)
            blob.metadata = dict(metadata)
            try:
                blob.upload_from_string(
                    data,
                    content_type=PNG_CONTENT_TYPE,
                    if_generation_match=0,
                    retry=None,
                    timeout=self._timeout,
                )
            except api_exceptions.PreconditionFailed:
                # The deterministic name exists already: typically our own earlier attempt
                # whose answer was lost. Reuse it (error model: idempotent create-only).
                return

        self._write(uri, upload)
        return uri

    def list_objects(self, prefix: str, *, start_offset: str = "") -> list[ListedObject]:
        listed: list[ListedObject] = []

        def one_page() -> None:
            blobs = self._bucket.list_blobs(
                prefix=prefix,
                start_offset=start_offset or None,
                max_results=LIST_PAGE_SIZE,  # one request: the iterator stops there
                fields="items(name,contentType,metadata),nextPageToken",
                retry=None,
                timeout=self._timeout,
            )
            listed[:] = [ListedObject(b.name, b.content_type, dict(b.metadata or {})) for b in blobs]

        self._retried(gcs_uri(self.bucket, prefix), one_page, action="listing", failure=ArtifactListError)
        return listed

    def read_head(self, object_path: str, size: int) -> bytes:
        head = b""

        def ranged_read() -> None:
            nonlocal head
            # checksum=None: a range has no checksum of its own to check
            head = self._bucket.blob(object_path).download_as_bytes(
                start=0, end=size - 1, checksum=None, retry=None, timeout=self._timeout
            )

        uri = gcs_uri(self.bucket, object_path)
        self._retried(uri, ranged_read, action="reading", failure=ArtifactReadError)
        return head

    def put_manifest(
        self, object_path: str, data: bytes, *, still_ours: Callable[[], bool] | None = None
    ) -> str:
        uri = gcs_uri(self.bucket, object_path)
        if still_ours is None:
            self._write(uri, self._manifest_upload(object_path, data, generation=None))
            return uri
        # Each write is made on the version known BEFORE the fence said yes, so one written
        # after it fails (412) instead of being replaced. First as if there were none yet
        # (the common case: one request); after a 412, on the generation now there.
        expected = 0
        for _ in range(MANIFEST_FENCE_TRIES):
            if not still_ours():
                raise ClaimSuperseded(
                    f"{object_path}: the claim was taken back before the manifest was written"
                )
            try:
                self._write(uri, self._manifest_upload(object_path, data, generation=expected))
                return uri
            except ArtifactWriteError as exc:
                if not isinstance(exc.__cause__, api_exceptions.PreconditionFailed):
                    raise
            expected = self._current_generation(uri, object_path)
        raise ArtifactWriteError(
            f"writing {uri}: the object kept changing under {MANIFEST_FENCE_TRIES} tries"
        )

    def _manifest_upload(
        self, object_path: str, data: bytes, *, generation: int | None
    ) -> Callable[[], None]:
        def upload() -> None:
            blob = self._bucket.blob(object_path)
            blob.cache_control = MANIFEST_CACHE_CONTROL
            blob.upload_from_string(
                data,
                content_type=MANIFEST_CONTENT_TYPE,
                if_generation_match=generation,
                retry=None,
                timeout=self._timeout,
            )

        return upload

    def _current_generation(self, uri: str, object_path: str) -> int:
        """The object's generation now, 0 when there is none."""
        current: Any = None

        def look() -> None:
            nonlocal current
            current = self._bucket.get_blob(object_path, retry=None, timeout=self._timeout)

        self._write(uri, look, action="reading the generation of")  # retried as a write is
        return int(current.generation) if current is not None else 0

    def _write(self, uri: str, upload: Callable[[], None], *, action: str = "writing") -> None:
        self._retried(uri, upload, action=action, failure=ArtifactWriteError, retrying=self._writes)

    def _retried(
        self,
        uri: str,
        call: Callable[[], None],
        *,
        action: str,
        failure: type[StoreError],
        retrying: Retrying | None = None,
    ) -> None:
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            call()

        try:
            # copy(): a fresh controller per call, so concurrent calls share no state
            (retrying or self._requests).copy()(attempt)
        except Exception as exc:
            message = self._failure_message(action, uri, exc, attempts)
            if isinstance(exc, api_exceptions.NotFound) and action in ("writing", "listing"):
                raise BucketUnusable(message) from exc  # the bucket is gone, not one object
            if failure is ArtifactWriteError:
                raise ArtifactWriteError(message, transient=is_transient(exc)) from exc
            raise failure(message) from exc

    def _failure_message(self, action: str, uri: str, exc: BaseException, attempts: int) -> str:
        kind = "transient error, retries exhausted" if is_transient(exc) else "not retried"
        hint = ""
        if isinstance(exc, api_exceptions.NotFound) and action in ("reading", "deleting"):
            hint = f" (no such object, or bucket {self.bucket!r} not found)"
        elif isinstance(exc, api_exceptions.NotFound):
            # neither an upload nor a listing 404s on an object: the bucket is what is missing
            hint = f" (bucket {self.bucket!r} not found)"
        elif isinstance(exc, api_exceptions.Forbidden):
            access = {"writing": "write to", "listing": "list", "deleting": "delete in"}.get(action, "read")
            hint = f" (no permission to {access} bucket {self.bucket!r})"
        plural = "s" if attempts != 1 else ""
        return f"{action} {uri} failed after {attempts} attempt{plural} ({kind}): {describe_error(exc)}{hint}"
