"""Firestore CloudEvents -> runId + the READY CHART_EXPORT steps of the flow_run, cheaply.

Every write to any flow_run wakes this worker (our own claim and finalize included), and
almost every event is a no-op, so the filter never builds the document:
- an update carries the old and the new document: only the new one (`value`) is parsed;
- it is parsed with a "skim" message type, wire-compatible with `firestore.v1.Document`,
  that decodes the top-level fields and leaves each step serialized as bytes;
- a step can only be READY CHART_EXPORT if its bytes contain both words (protobuf stores
  strings verbatim), so only such candidates are parsed, with the real `Value` type, and
  checked exactly (`stepType`, `status` string values).
On a 200-step flow_run this costs ~0.1 ms where a proto-plus conversion costs ~19 ms
(benchmarks/bench_noop_path.py measures the whole no-op path).
Nothing here imports a Firestore, GCS or HTTP client, nor pydantic.

Payloads met in practice:
- production Eventarc: `application/protobuf` DocumentEventData bytes;
- the Firestore emulator: base64 text of those bytes (as str or bytes);
- JSON: the Firestore REST shape `{"value": {"name", "fields": {<typed Value JSON>}}, ...}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, Protocol
from urllib.parse import unquote

from google.protobuf.message import DecodeError

from worker_chart_export.core.document_ids import document_id_problem
from worker_chart_export.core.exceptions import PoisonEvent, UndecodableValue
from worker_chart_export.core.naming import FLOW_RUNS_COLLECTION
from worker_chart_export.core.step_rules import is_ready_chart_export
from worker_chart_export.core.types import CHART_EXPORT, StepStatus
from worker_chart_export.functions.decoding.skim import (
    RawDocument,
    RawDocumentEventData,
    RawValue,
    SkimDocument,
    SkimEventData,
    SkimMapEntry,
)
from worker_chart_export.functions.decoding.values import document_to_python, timestamp_to_datetime

_CHART_EXPORT_BYTES = CHART_EXPORT.encode()
# a C-level predicate for filter(): ~2x cheaper per step than a Python-level `in`
_READY_BYTES = StepStatus.READY.value.encode()
# bound `search` methods, so that filter() scans the entries without a Python-level loop
_mentions_ready = re.compile(re.escape(_READY_BYTES)).search
_mentions_chart_export = re.compile(re.escape(_CHART_EXPORT_BYTES)).search

PayloadFormat = Literal["protobuf", "base64-protobuf", "json"]

# A raw DocumentEventData starts with the tag byte of field 1, 2 or 3 (0x0a/0x12/0x1a),
# none of which is a base64 character; base64 text always starts with one.
_BASE64_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


class CloudEventLike(Protocol):
    """What we need from `cloudevents.http.CloudEvent` (attributes by name, and data)."""

    data: Any

    def get(self, key: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class DecodedEvent:
    run_id: str
    document_name: str  # full resource name of the document
    deleted: bool
    ready_step_ids: tuple[str, ...]  # READY CHART_EXPORT steps, in sorted() order
    payload_format: PayloadFormat
    flow_key: str | None = None
    # the new state, still serialized (b"" when deleted): see `document`
    document_bytes: bytes = b""

    @property
    def chosen_step_id(self) -> str | None:
        """Contract §2.2: the first READY CHART_EXPORT step by plain string order."""
        return self.ready_step_ids[0] if self.ready_step_ids else None

    @cached_property
    def document(self) -> Any:
        """The raw `firestore.v1.Document`, parsed on first use (for a full dict, a debug
        log, a test): convert it with `document_to_python` / `step_to_python`."""
        return RawDocument.FromString(self.document_bytes)


def decode_event(cloud_event: CloudEventLike) -> DecodedEvent:
    """Decode a Firestore document event for `flow_runs/{runId}`.

    Raises PoisonEvent when the payload cannot be decoded or is not a flow_run document.
    """
    value_bytes, old_value_bytes, payload_format = split_event_payload(cloud_event.data)
    try:
        value = SkimDocument.FromString(value_bytes) if value_bytes is not None else None
        # the old state matters only for its name, and only when there is no new state
        old_value = (
            SkimDocument.FromString(old_value_bytes)
            if old_value_bytes is not None and (value is None or not value.name)
            else None
        )
    except DecodeError:
        raise PoisonEvent("payload document is not a serialized Firestore Document") from None
    if value is not None and value.name:
        document_name = value.name
    elif old_value is not None and old_value.name:
        document_name = old_value.name
    else:
        # a real delete still carries oldValue; nothing at all means the bytes are not an event
        raise PoisonEvent("payload carries no document (neither value nor oldValue has a name)")
    run_id = _resolve_run_id(cloud_event, document_name)
    if value is None or not value.name:
        return DecodedEvent(
            run_id=run_id,
            document_name=document_name,
            deleted=True,
            ready_step_ids=(),
            payload_format=payload_format,
        )
    flow_key = value.fields.get("flowKey")
    return DecodedEvent(
        run_id=run_id,
        document_name=document_name,
        deleted=False,
        ready_step_ids=ready_chart_export_step_ids(value, serialized=value_bytes),
        payload_format=payload_format,
        flow_key=(flow_key.string_value or None) if flow_key is not None else None,
        document_bytes=value_bytes or b"",
    )


def split_event_payload(data: object) -> tuple[bytes | None, bytes | None, PayloadFormat]:
    """Any of the three payload shapes -> (value, old_value, shape), each document still
    serialized (None when absent)."""
    if data is None or (isinstance(data, str | bytes | bytearray) and not data):
        raise PoisonEvent("empty payload")
    if isinstance(data, Mapping):
        return (*_json_documents(data), "json")
    if isinstance(data, str):
        text = data.strip()
        if text.startswith("{"):
            return (*_json_documents(_load_json_object(text)), "json")
        try:
            data = text.encode("ascii")
        except UnicodeEncodeError:
            raise PoisonEvent("text payload is neither JSON nor base64") from None
    if not isinstance(data, bytes | bytearray | memoryview):
        raise PoisonEvent(f"unsupported payload type {type(data).__name__}")

    raw = bytes(data)
    if not raw:
        raise PoisonEvent("empty payload")
    if raw[:1] == b"{":
        return (*_json_documents(_load_json_object(raw)), "json")
    if raw[0] in _BASE64_ALPHABET:
        decoded = _base64_bytes(raw)
        if decoded is not None:
            try:
                return (*_protobuf_documents(decoded), "base64-protobuf")
            except DecodeError:
                pass  # base64-looking bytes that are not an event: try them as protobuf
    try:
        return (*_protobuf_documents(raw), "protobuf")
    except DecodeError:
        raise PoisonEvent(
            f"payload ({len(raw)} bytes) is neither a DocumentEventData protobuf, nor base64 of one, nor JSON"
        ) from None


def ready_chart_export_step_ids(document: Any, *, serialized: bytes | None = None) -> tuple[str, ...]:
    """READY CHART_EXPORT step ids of a `SkimDocument`, in sorted() order. `serialized`,
    the document's bytes, lets most events skip the per-step scan.

    Raises PoisonEvent when the document has no `steps` map (it is not a flow_run).
    """
    steps_value = document.fields.get("steps")
    if steps_value is None:
        raise PoisonEvent("document has no steps field: not a flow_run")
    if not steps_value.HasField("map_value"):
        raise PoisonEvent("document field steps is not a map: not a flow_run")
    if serialized is not None and not (_CHART_EXPORT_BYTES in serialized and _READY_BYTES in serialized):
        return ()  # neither word anywhere: no step can match (the usual no-op)
    ready = [
        step_id
        for step_id, step_fields in map(_parse_step_entry, _candidate_entries(steps_value.map_value))
        if _is_ready_chart_export(step_fields)
    ]
    return tuple(sorted(ready))


def _candidate_entries(skim_map: Any) -> list[bytes]:
    """Serialized step entries that contain both words: protobuf stores strings verbatim,
    so a READY CHART_EXPORT step cannot be elsewhere. (Firestore never repeats a map key on
    the wire, so an entry is never overridden by a later one.)"""
    return list(filter(_mentions_chart_export, filter(_mentions_ready, list(skim_map.entries))))


def _parse_step_entry(entry_bytes: bytes) -> tuple[str, Any]:
    """(step id, the step's fields) of one serialized `steps` entry, with the real types."""
    try:
        entry = SkimMapEntry.FromString(entry_bytes)
        return entry.key, RawValue.FromString(entry.value).map_value.fields
    except DecodeError:
        # the full parser would reject the whole document for this
        raise PoisonEvent("document is corrupt: a steps entry does not parse") from None


def _is_ready_chart_export(step_fields: Any) -> bool:
    """The core's predicate on the step's two string fields; a step that is not a map reads
    as an empty map, a non-string field as "": simply not READY."""
    summary = {
        name: value.string_value
        for name in ("status", "stepType")
        if (value := step_fields.get(name)) is not None
    }
    return is_ready_chart_export(summary)


def _json_documents(payload: Mapping[str, Any]) -> tuple[bytes | None, bytes | None]:
    # json_format is only needed for this shape, which production does not send
    from google.protobuf import json_format

    message = RawDocumentEventData()
    try:
        json_format.ParseDict(dict(payload), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise PoisonEvent(f"JSON payload is not a DocumentEventData: {_excerpt(str(exc), 200)}") from None
    except RecursionError:
        raise PoisonEvent("JSON payload is nested too deeply to be a DocumentEventData") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # json_format's own checks stop short of some values (`"nullValue": Infinity`)
        raise PoisonEvent(f"JSON payload is not a DocumentEventData: {type(exc).__name__}: {exc}") from None
    return _serialized_documents(message)


def _serialized_documents(event_data: Any) -> tuple[bytes | None, bytes | None]:
    return (
        event_data.value.SerializeToString() if event_data.HasField("value") else None,
        event_data.old_value.SerializeToString() if event_data.HasField("old_value") else None,
    )


def _load_json_object(text: str | bytes) -> Mapping[str, Any]:
    try:
        loaded = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise PoisonEvent("payload looks like JSON but does not parse") from None
    except RecursionError:
        raise PoisonEvent("payload is JSON nested too deeply to parse") from None
    if not isinstance(loaded, Mapping):
        raise PoisonEvent(f"JSON payload is a {type(loaded).__name__}, not an object")
    return loaded


def _base64_bytes(raw: bytes) -> bytes | None:
    """The emulator's base64 text -> the protobuf bytes; None when it is not base64."""
    try:
        return base64.b64decode(raw.strip(), validate=True)
    except binascii.Error:
        return None


def _protobuf_documents(raw: bytes) -> tuple[bytes | None, bytes | None]:
    """Raises DecodeError when the bytes are not a DocumentEventData."""
    event_data = SkimEventData.FromString(raw)
    if len(event_data.value) > 1 or len(event_data.old_value) > 1:
        # a message field given twice is merged by protobuf: let upb do it properly
        return _serialized_documents(RawDocumentEventData.FromString(raw))
    return (
        event_data.value[0] if event_data.value else None,
        event_data.old_value[0] if event_data.old_value else None,
    )


def _resolve_run_id(cloud_event: CloudEventLike, document_name: str) -> str:
    """The event's runId, which must be an id Firestore can hold: such an id is never sent by
    Firestore, and its client would reject it on every redelivery."""
    run_id = _named_run_id(cloud_event, document_name)
    problem = document_id_problem(run_id)
    if problem is not None:
        raise PoisonEvent(f"runId {_excerpt(run_id)}: {problem}")
    return run_id


def _named_run_id(cloud_event: CloudEventLike, document_name: str) -> str:
    """runId from the event's `subject` / `document` attribute, else the payload's name.

    Both must name the same flow_runs/{runId} document when both are present: otherwise the
    steps we filtered are not those of the document we would claim.
    """
    attribute_path, attribute_source = _event_document_path(cloud_event)
    payload_path = _relative_document_path(document_name)
    attribute_run_id = _flow_run_id(attribute_path, attribute_source) if attribute_path is not None else None
    payload_run_id = _flow_run_id(payload_path, "payload document") if payload_path else None
    if attribute_run_id is None:
        if payload_run_id is None:
            raise PoisonEvent("event names no document (no subject, document attribute or name)")
        return payload_run_id
    if payload_run_id is None or payload_run_id == attribute_run_id:
        return attribute_run_id
    if unquote(payload_run_id) == unquote(attribute_run_id):
        return payload_run_id  # same id, encoded differently: the payload has the real one
    raise PoisonEvent(
        f"{attribute_source} names flow_runs/{attribute_run_id} but the payload is {payload_path}"
    )


def _event_document_path(cloud_event: CloudEventLike) -> tuple[str | None, str]:
    subject = cloud_event.get("subject")
    if isinstance(subject, str) and subject:
        if not subject.startswith("documents/"):
            raise PoisonEvent(f"subject {subject!r} is not a Firestore document subject")
        return subject.removeprefix("documents/"), "subject"
    document = cloud_event.get("document")
    if isinstance(document, str) and document:
        return document, "document attribute"
    return None, ""


def _relative_document_path(document_name: str) -> str | None:
    """`projects/p/databases/d/documents/flow_runs/R` -> `flow_runs/R`."""
    if not document_name:
        return None
    head, separator, path = document_name.partition("/documents/")
    if not separator or not head.startswith("projects/") or "/databases/" not in head:
        raise PoisonEvent(f"document name {document_name!r} is not a Firestore resource name")
    return path


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


def _flow_run_id(path: str, source: str) -> str:
    segments = path.split("/")
    if len(segments) != 2 or segments[0] != FLOW_RUNS_COLLECTION or not segments[1]:
        raise PoisonEvent(f"{source} {path!r} is not a {FLOW_RUNS_COLLECTION}/{{runId}} document")
    return segments[1]


@dataclass(frozen=True)
class DocumentVersion:
    """One version of a flow_run as an event carries it (advance_flow reads all of it)."""

    run_id: str
    document: dict[str, Any] | None  # None: the document was deleted
    update_time: datetime | None  # the version's update time, for a precondition (None: deleted, or not sent)
    created: bool = False  # the event is the document's creation (it carries no old version)


def decode_document_version(cloud_event: CloudEventLike) -> DocumentVersion:
    """The new document of a Firestore event (created, updated or written), converted whole,
    with its update time.

    Raises PoisonEvent when the payload cannot be decoded, names no flow_runs document, or
    holds a timestamp Firestore never writes (a forged event; redelivering it cannot help).
    A version without an update time (Firestore always sends one) has `update_time` None.
    """
    value_bytes, old_value_bytes, _ = split_event_payload(cloud_event.data)
    try:
        value = RawDocument.FromString(value_bytes) if value_bytes is not None else None
        old_value = RawDocument.FromString(old_value_bytes) if old_value_bytes is not None else None
    except DecodeError:
        raise PoisonEvent("payload document is not a serialized Firestore Document") from None
    current = value if value is not None and value.name else None
    previous = old_value if old_value is not None and old_value.name else None
    named = current or previous
    if named is None:
        raise PoisonEvent("payload carries no document (neither value nor oldValue has a name)")
    run_id = _resolve_run_id(cloud_event, named.name)
    if current is None:
        return DocumentVersion(run_id, None, None)
    try:
        updated = timestamp_to_datetime(current.update_time) if current.HasField("update_time") else None
        document = document_to_python(current)
    except UndecodableValue as exc:
        raise PoisonEvent(f"the document holds a timestamp Firestore never writes: {exc}") from None
    return DocumentVersion(run_id, document, updated, created=previous is None)
