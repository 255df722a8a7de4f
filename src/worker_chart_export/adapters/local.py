"""Local adapters for run-local: a flow_run JSON file, the templates directory, a folder
that mirrors the bucket. Same protocols as production, and the flow_run store executes the
same claim/finalize plans (core/step/step_rules.py) under a file lock."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worker_chart_export.adapters.planned_flow_runs import PlannedFlowRuns
from worker_chart_export.core.documents import FlowRunDocument, as_flow_run
from worker_chart_export.core.exceptions import (
    ArtifactListError,
    ArtifactReadError,
    ArtifactWriteError,
    BucketUnusable,
    ClaimSuperseded,
)
from worker_chart_export.core.flow.flow_rules import AdvancePlan, apply_plan
from worker_chart_export.core.naming import gcs_uri, is_safe_segment
from worker_chart_export.core.step.reuse import LIST_PAGE_SIZE, PNG_CONTENT_TYPE
from worker_chart_export.core.templates.template_check import StoredTemplate, TemplateCheck, template_problems
from worker_chart_export.core.types import ListedObject


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class LocalFlowRunStore(PlannedFlowRuns):
    """The flow_run lives in `source`; every change is written to `state` (created on first
    write), which later reads prefer: the bundled sample stays pristine and a second run sees
    the step already finalized."""

    def __init__(self, source: Path, state: Path) -> None:
        self.source = source
        self.state = state
        self._thread_lock = threading.Lock()

    def read(self) -> FlowRunDocument:
        path = self.state if self.state.exists() else self.source
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            raise ValueError(f"{path}: a flow_run must be a JSON object")
        return as_flow_run(document)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # A file lock as well, so two run-local processes on the same state cannot both claim.
        self.state.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.state.with_name(self.state.name + ".lock")
        with self._thread_lock, lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write(self, document: Mapping[str, Any]) -> None:
        _atomic_write(self.state, (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode())

    def _document_of(self, run_id: str) -> FlowRunDocument | None:
        document = self.read()
        return document if document.get("runId") == run_id else None

    # the claim, the finalize and the fence: PlannedFlowRuns', over the state file
    def _load(self, run_id: str) -> FlowRunDocument | None:
        return self._document_of(run_id)

    def _save(self, run_id: str, document: FlowRunDocument) -> None:
        self._write(document)

    def read_version(self, run_id: str) -> tuple[FlowRunDocument, datetime] | None:
        """The run and its version (the modification time of the file read: the state, else
        the source), as an event would carry them; None when the file holds another run."""
        document = self._document_of(run_id)
        return None if document is None else (document, self._version())

    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        """advance_flow's write, under the lock, only onto the version the plan was made
        from: False when the run's file changed since (or holds another run)."""
        with self._locked():
            document = self._document_of(run_id)
            if document is None or self._version() != last_update_time:
                return False
            self._write(apply_plan(document, plan))
            return True

    def _version(self) -> datetime:
        path = self.state if self.state.exists() else self.source
        return datetime.fromtimestamp(path.stat().st_mtime_ns / 1e9, tz=UTC)


class LocalTemplateSource:
    """chart-templates/<id>.json, looked at on every call: local edits show up at once. A
    file whose stamp (modification time in ns, size, inode) did not change is neither read
    again nor checked again: the StoredTemplate already returned is returned once more."""

    def __init__(self, directory: Path, *, check: TemplateCheck = template_problems) -> None:
        self.directory = directory
        self._check = check
        self._lock = threading.Lock()
        self._known: dict[str, StoredTemplate] = {}

    def get_templates(self, template_ids: Sequence[str]) -> dict[str, StoredTemplate]:
        found: dict[str, StoredTemplate] = {}
        for template_id in template_ids:
            if not is_safe_segment(template_id):
                continue
            stored = self._stored(template_id, self.directory / f"{template_id}.json")
            if stored is not None:
                found[template_id] = stored
        return found

    def _stored(self, template_id: str, path: Path) -> StoredTemplate | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        if not path.is_file():
            return None
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        with self._lock:
            known = self._known.get(template_id)
        if known is not None and known.revision == stamp:
            return known
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            return None
        stored = StoredTemplate(template_id, document, stamp, check=self._check)
        with self._lock:
            self._known[template_id] = stored
        return stored


class LocalArtifactStore:
    """`<root>/<bucket>/<object path>`: the bucket's layout on disk; URIs stay gs://<bucket>/...
    An object's content type and metadata, which a file cannot hold, are kept beside it in
    `.<name>.meta.json` (a dot name: never listed as an object, as a write's temporary files)."""

    def __init__(self, root: Path, bucket: str) -> None:
        self.root = root
        self.bucket = bucket

    def local_path(self, object_path: str) -> Path:
        target = (self.root / self.bucket / object_path).resolve()
        if not target.is_relative_to((self.root / self.bucket).resolve()):
            raise ArtifactWriteError(f"object path {object_path!r} escapes the bucket folder")
        return target

    @staticmethod
    def _meta_path(target: Path) -> Path:
        return target.with_name(f".{target.name}.meta.json")

    def check_bucket(self) -> None:
        """The bucket folder, or the nearest folder it would be created in, takes our files;
        nothing is created (a step refused before its claim writes nothing)."""
        folder = (self.root / self.bucket).absolute()
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir():
            raise BucketUnusable(f"bucket folder {folder} cannot be created: {existing} is not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise BucketUnusable(f"bucket folder {folder} cannot be written: {existing} is not writable")

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        target = self.local_path(object_path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            # create-only like ifGenerationMatch=0, and whole or absent like a GCS object: a
            # PNG a later execution lists (core/step/reuse.py) is never half written
            os.link(tmp, target)
            # after the PNG: one listed before its metadata lands carries no digest, and is
            # rendered anew rather than reused
            description = {"contentType": PNG_CONTENT_TYPE, "metadata": dict(metadata)}
            _atomic_write(self._meta_path(target), json.dumps(description).encode())
        except FileExistsError:
            pass  # same deterministic name: an earlier write of ours, with its own metadata
        except OSError as exc:
            raise ArtifactWriteError(f"cannot write {target}: {exc.strerror}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        return gcs_uri(self.bucket, object_path)

    def list_objects(self, prefix: str, *, start_offset: str = "") -> list[ListedObject]:
        """As GCS lists: every object under `prefix`, by name, from `start_offset` on, one
        page at most, each with the content type and metadata kept beside it (none for a
        file put there by other means); dot names (temporary files, metadata) are no objects."""
        folder = self.local_path(prefix)
        bucket = (self.root / self.bucket).resolve()
        try:
            files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        except OSError as exc:
            raise ArtifactListError(f"cannot list {folder}: {exc.strerror}") from exc
        by_name = {p.relative_to(bucket).as_posix(): p for p in files if not p.name.startswith(".")}
        names = sorted(n for n in by_name if n.startswith(prefix) and n >= start_offset)[:LIST_PAGE_SIZE]
        return [self._listed(name, by_name[name]) for name in names]

    def _listed(self, name: str, path: Path) -> ListedObject:
        try:
            description = json.loads(self._meta_path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ListedObject(name)
        if not isinstance(description, dict):
            return ListedObject(name)
        content_type, metadata = description.get("contentType"), description.get("metadata")
        return ListedObject(
            name,
            content_type if isinstance(content_type, str) else None,
            {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, dict) else {},
        )

    def read_head(self, object_path: str, size: int) -> bytes:
        try:
            with self.local_path(object_path).open("rb") as handle:
                return handle.read(size)
        except (OSError, ArtifactWriteError) as exc:
            raise ArtifactReadError(f"cannot read {object_path}: {exc}") from exc

    def put_manifest(
        self, object_path: str, data: bytes, *, still_ours: Callable[[], bool] | None = None
    ) -> str:
        if still_ours is not None and not still_ours():
            raise ClaimSuperseded(f"{object_path}: the claim was taken back before the manifest was written")
        try:
            _atomic_write(self.local_path(object_path), data)
        except OSError as exc:
            raise ArtifactWriteError(f"cannot write {object_path}: {exc.strerror}") from exc
        return gcs_uri(self.bucket, object_path)
