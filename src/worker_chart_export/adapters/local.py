"""Local adapters for run-local: a flow_run JSON file, the templates directory, a folder
that mirrors the bucket. Same protocols and the same claim/finalize rules as production."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worker_chart_export.core.errors import ArtifactWriteError
from worker_chart_export.core.naming import gcs_uri, is_safe_segment, rfc3339_utc
from worker_chart_export.core.types import (
    CHART_EXPORT,
    Claim,
    ClaimOutcome,
    ClaimStatus,
    FinalizeOutcome,
    StepFinal,
    StepStatus,
)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class LocalFlowRunStore:
    """The flow_run lives in `source`; every change is written to `state` (created on first
    write), which later reads prefer: the bundled sample stays pristine and a second run sees
    the step already finalized."""

    def __init__(self, source: Path, state: Path) -> None:
        self.source = source
        self.state = state
        self._thread_lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        path = self.state if self.state.exists() else self.source
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            raise ValueError(f"{path}: a flow_run must be a JSON object")
        return document

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

    def claim_step(
        self, run_id: str, step_id: str, *, token: str, now: Any, lease_expires_at: Any
    ) -> ClaimOutcome:
        with self._locked():
            document = self.read()
            if document.get("runId") != run_id:
                return ClaimOutcome(ClaimStatus.NOT_FOUND, f"flow_run {run_id!r} is not in {self.source}")
            step = (document.get("steps") or {}).get(step_id)
            if not isinstance(step, dict):
                return ClaimOutcome(ClaimStatus.CONFLICT, f"step {step_id} does not exist")
            if step.get("stepType") != CHART_EXPORT or step.get("status") != StepStatus.READY:
                return ClaimOutcome(
                    ClaimStatus.CONFLICT,
                    f"step {step_id} is {step.get('stepType')} {step.get('status')}, "
                    f"not a READY {CHART_EXPORT}",
                )
            attempt = (step.get("attempt") if isinstance(step.get("attempt"), int) else 0) + 1
            step.pop("finishedAt", None)
            step.pop("error", None)
            step.update(
                status=StepStatus.RUNNING.value,
                startedAt=rfc3339_utc(now),
                attempt=attempt,
                claimToken=token,
                leaseExpiresAt=rfc3339_utc(lease_expires_at),
            )
            self._write(document)
            return ClaimOutcome(
                ClaimStatus.CLAIMED, "claimed", document, Claim(token, attempt, now, lease_expires_at)
            )

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeOutcome:
        with self._locked():
            document = self.read()
            step = (document.get("steps") or {}).get(step_id)
            if not isinstance(step, dict):
                return FinalizeOutcome(False, f"step {step_id} no longer exists")
            if step.get("status") != StepStatus.RUNNING:
                return FinalizeOutcome(False, f"step {step_id} is {step.get('status')}, not RUNNING")
            if step.get("claimToken") != token:
                return FinalizeOutcome(False, "claim token differs: another execution owns the step")
            step["status"] = final.status.value
            step["finishedAt"] = rfc3339_utc(final.finished_at)
            if final.outputs:
                previous = step.get("outputs")
                step["outputs"] = {**(previous if isinstance(previous, dict) else {}), **final.outputs}
            if final.error:
                step["error"] = final.error.to_dict()
            else:
                step.pop("error", None)
            self._write(document)
            return FinalizeOutcome(True, "finalized")


class LocalTemplateSource:
    """chart-templates/<id>.json, read on every call: local edits show up at once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get_templates(self, template_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        found: dict[str, Mapping[str, Any]] = {}
        for template_id in template_ids:
            path = self.directory / f"{template_id}.json"
            if is_safe_segment(template_id) and path.is_file():
                document = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(document, dict):
                    found[template_id] = document
        return found


class LocalArtifactStore:
    """`<root>/<bucket>/<object path>`: the bucket's layout on disk; URIs stay gs://<bucket>/..."""

    def __init__(self, root: Path, bucket: str) -> None:
        self.root = root
        self.bucket = bucket

    def local_path(self, object_path: str) -> Path:
        target = (self.root / self.bucket / object_path).resolve()
        if not target.is_relative_to((self.root / self.bucket).resolve()):
            raise ArtifactWriteError(f"object path {object_path!r} escapes the bucket folder")
        return target

    def create_png(self, object_path: str, data: bytes) -> str:
        target = self.local_path(object_path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("xb") as handle:  # create-only, like ifGenerationMatch=0
                handle.write(data)
        except FileExistsError:
            pass  # same deterministic name: an earlier write of ours
        except OSError as exc:
            raise ArtifactWriteError(f"cannot write {target}: {exc.strerror}") from exc
        return gcs_uri(self.bucket, object_path)

    def put_manifest(self, object_path: str, data: bytes) -> str:
        try:
            _atomic_write(self.local_path(object_path), data)
        except OSError as exc:
            raise ArtifactWriteError(f"cannot write {object_path}: {exc.strerror}") from exc
        return gcs_uri(self.bucket, object_path)
