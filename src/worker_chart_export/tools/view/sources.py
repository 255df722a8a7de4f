"""Reading a run for the page: the manifest, its PNGs and optionally a flow_run state file,
from run-local's output folder (a mirror of the bucket) or from GCS (real or fake-gcs-server).

Everything read here is untrusted: the manifest is read by the one manifest reader
(core/step/manifest_reader.py: the contract's schema, its format version, real moments) before
any of its values is used, and object names never escape the local mirror (no `..` segments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from worker_chart_export.core.step.manifest_reader import ManifestUnreadable, ReadManifest, read_manifest
from worker_chart_export.core.types import StepStatus
from worker_chart_export.tools.view.model import ChartImage, StepState, ViewInputError

if TYPE_CHECKING:
    from google.cloud import storage

MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 10 * 1024 * 1024
MAX_PNG_BYTES = 20 * 1024 * 1024
_GCS_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class LoadedRun:
    manifest: ReadManifest
    images: dict[str, ChartImage]  # keyed by png_gcs_uri
    source: str  # the manifest's path or gs:// URI
    local_dir: Path | None  # the manifest's folder when it was read from disk


def split_gs_uri(uri: str) -> tuple[str, str]:
    """gs://bucket/object -> (bucket, object); raises ViewInputError on anything else."""
    if not uri.startswith("gs://"):
        raise ViewInputError(f"{uri!r} is not a gs:// URI")
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ViewInputError(f"{uri!r} names no bucket")
    return bucket, name


def parse_manifest(raw: bytes, where: str) -> ReadManifest:
    """A manifest's bytes -> its values (`read_manifest`), refused beyond MAX_MANIFEST_BYTES."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ViewInputError(
            f"{where}: {len(raw)} bytes, larger than a manifest can be ({MAX_MANIFEST_BYTES})"
        )
    try:
        return read_manifest(raw, where)
    except ManifestUnreadable as exc:
        raise ViewInputError(str(exc)) from exc


def parse_state(raw: bytes, where: str, run_id: str, step_id: str) -> StepState:
    """The step's status (and error) as a flow_run document, e.g. run-local's state file, records it."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ViewInputError(f"flow_run state {where}: not a JSON document ({exc})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("steps"), dict):
        raise ViewInputError(f"flow_run state {where}: not a flow_run (an object with a steps map)")
    if document.get("runId") not in (None, run_id):
        raise ViewInputError(
            f"flow_run state {where} is run {str(document['runId'])!r}, the manifest is run {run_id!r}"
        )
    step = document["steps"].get(step_id)
    if not isinstance(step, dict):
        raise ViewInputError(f"flow_run state {where} has no step {step_id!r}")
    status = step.get("status")
    if status not in set(StepStatus):
        raise ViewInputError(
            f"flow_run state {where}: steps.{step_id}.status {status!r} is not a step status"
        )
    error = step.get("error")
    if not isinstance(error, dict):
        error = {}
    code, message = error.get("code"), error.get("message")
    return StepState(
        status=str(status),
        source=where,
        error_code=code if isinstance(code, str) else None,
        error_message=message if isinstance(message, str) else None,
    )


# --- local: run-local's output folder mirrors the bucket at <root>/<bucket>/<object>


def find_local_manifest(path: Path) -> Path:
    """A manifest file, a step folder holding manifest.json, or a folder with exactly one below it."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise ViewInputError(f"{path}: no such file or folder")
    if (path / MANIFEST_NAME).is_file():
        return path / MANIFEST_NAME
    found = sorted(p for p in path.rglob(MANIFEST_NAME) if p.is_file())
    if not found:
        raise ViewInputError(f"{path}: no {MANIFEST_NAME} in this folder or below it")
    if len(found) > 1:
        listed = ", ".join(str(p) for p in found[:5]) + (" ..." if len(found) > 5 else "")
        raise ViewInputError(f"{path}: {len(found)} manifests below this folder, name one: {listed}")
    return found[0]


def _safe_object_name(name: str) -> bool:
    return bool(name) and all(part not in ("", ".", "..") for part in name.split("/"))


def local_png_candidates(uri: str, manifest_path: Path, manifest: ReadManifest) -> list[Path]:
    """Where a PNG of a local manifest may be: the bucket mirror, then beside the manifest.

    The manifest lives at <root>/<bucket>/charts/<runId>/<stepId>/manifest.json, so <root> is
    four folders up when the folders say so; a manifest copied elsewhere keeps its PNGs beside it.
    """
    bucket, name = split_gs_uri(uri)
    if not _safe_object_name(name) or bucket in (".", ".."):
        return []
    folder = manifest_path.parent
    candidates = []
    expected = [manifest.step_id, manifest.run_id, "charts"]
    if [folder.name, folder.parent.name, folder.parents[1].name] == expected and len(folder.parents) > 3:
        candidates.append(folder.parents[3] / bucket / name)
    beside = folder / name.rsplit("/", 1)[-1]
    if beside not in candidates:
        candidates.append(beside)
    return candidates


def _read_local_png(uri: str, manifest_path: Path, manifest: ReadManifest) -> ChartImage:
    candidates = local_png_candidates(uri, manifest_path, manifest)
    if not candidates:
        return ChartImage(where=uri, problem=f"{uri} has an unsafe object name; not read")
    for path in candidates:
        if path.is_file():
            try:
                size = path.stat().st_size
                if size > MAX_PNG_BYTES:
                    return ChartImage(
                        where=str(path), problem=f"{path} is {size} bytes, over {MAX_PNG_BYTES}"
                    )
                return ChartImage(where=str(path), data=path.read_bytes())
            except OSError as exc:
                return ChartImage(where=str(path), problem=f"{path} cannot be read: {exc.strerror or exc}")
    tried = " or ".join(str(p) for p in candidates)
    return ChartImage(where=str(candidates[0]), problem=f"PNG missing: not found at {tried}")


def load_local(path: Path) -> LoadedRun:
    manifest_path = find_local_manifest(path)
    try:
        raw = manifest_path.read_bytes()
    except OSError as exc:
        raise ViewInputError(f"{manifest_path}: cannot be read: {exc.strerror or exc}") from exc
    manifest = parse_manifest(raw, str(manifest_path))
    images = {
        item.png_gcs_uri: _read_local_png(item.png_gcs_uri, manifest_path, manifest)
        for item in manifest.items
    }
    return LoadedRun(manifest, images, str(manifest_path), manifest_path.parent)


# --- GCS (STORAGE_EMULATOR_HOST points the client at fake-gcs-server and makes it anonymous)


def _storage_client() -> storage.Client:
    try:
        from google.auth.exceptions import DefaultCredentialsError

        from worker_chart_export.bootstrap.commands import storage_client  # only gs:// input pays
    except ImportError as exc:
        raise ViewInputError(f"reading gs:// needs google-cloud-storage: {exc}") from exc
    try:
        return storage_client()
    except DefaultCredentialsError as exc:
        raise ViewInputError(
            "gs:// input needs Google credentials (gcloud auth application-default login) "
            f"or STORAGE_EMULATOR_HOST for an emulator: {exc}"
        ) from exc


def _read_gcs_object(client: storage.Client, uri: str, max_bytes: int) -> bytes:
    """The object's bytes; raises ViewInputError naming the problem (missing, too big, unreachable)."""
    bucket, name = split_gs_uri(uri)
    if not name:
        raise ViewInputError(f"{uri} names no object")
    try:
        blob = client.bucket(bucket).get_blob(name, timeout=_GCS_TIMEOUT_SECONDS, retry=None)
        if blob is None:
            raise ViewInputError(f"{uri} does not exist")
        if blob.size is not None and blob.size > max_bytes:
            raise ViewInputError(f"{uri} is {blob.size} bytes, over {max_bytes}")
        data: bytes = blob.download_as_bytes(timeout=_GCS_TIMEOUT_SECONDS, retry=None)
        return data
    except ViewInputError:
        raise
    except Exception as exc:  # google.api_core, google.auth and requests errors alike: name them
        raise ViewInputError(f"{uri} cannot be read: {type(exc).__name__}: {exc}") from exc


def load_gcs(uri: str) -> LoadedRun:
    """gs://bucket/.../manifest.json, or the step's prefix gs://bucket/charts/<runId>/<stepId>/."""
    bucket, name = split_gs_uri(uri)
    if not name.endswith(".json"):
        uri = f"gs://{bucket}/{name.rstrip('/') + '/' if name else ''}{MANIFEST_NAME}"
    client = _storage_client()
    try:
        manifest = parse_manifest(_read_gcs_object(client, uri, MAX_MANIFEST_BYTES), uri)
        images: dict[str, ChartImage] = {}
        for item in manifest.items:
            png_uri = item.png_gcs_uri
            try:
                images[png_uri] = ChartImage(
                    where=png_uri, data=_read_gcs_object(client, png_uri, MAX_PNG_BYTES)
                )
            except ViewInputError as exc:
                images[png_uri] = ChartImage(where=png_uri, problem=str(exc))
    finally:
        client.close()
    return LoadedRun(manifest, images, uri, None)
