"""Firestore CloudEvents -> runId + the READY CHART_EXPORT steps of the flow_run, cheaply.

Every write to any flow_run wakes this worker (our own claim and finalize included), and
almost every event is a no-op, so the filter never builds the document:
- an update carries the old and the new document: only the new one (`value`) is parsed;
- it is parsed with a "skim" message type, wire-compatible with `firestore.v1.Document`,
  that decodes the top-level fields and leaves each step serialized as bytes;
- a step can only be READY and of a handled type (core.step.step_types) if its bytes contain
  both words (protobuf stores strings verbatim), so only such candidates are parsed, with the
  real `Value` type, and checked exactly (`stepType`, `status` string values).
On a 200-step flow_run this costs ~0.1 ms where a proto-plus conversion costs ~19 ms
(benchmarks/bench_noop_path.py measures the whole no-op path).
Nothing here imports a Firestore, GCS or HTTP client, nor pydantic.

The payload's shapes are payload.py's, the runId names.py's, the whole version versions.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from google.protobuf.message import DecodeError

from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.core.step.selection import ready_step_ids_in
from worker_chart_export.core.step.step_types import mentions_a_handled_type, names_a_handled_type
from worker_chart_export.core.types import StepStatus
from worker_chart_export.functions.decoding.names import CloudEventLike, resolve_run_id
from worker_chart_export.functions.decoding.payload import PayloadFormat, split_event_payload
from worker_chart_export.functions.decoding.skim import RawDocument, RawValue, SkimDocument, SkimMapEntry

_READY_BYTES = StepStatus.READY.value.encode()
# a bound `search`, a C-level predicate for filter() (~2x cheaper per step than a Python-level
# `in`), as core.step.step_types' mentions_a_handled_type is
_mentions_ready = re.compile(re.escape(_READY_BYTES)).search


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
    run_id = resolve_run_id(cloud_event, document_name)
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
        ready_step_ids=_ready_step_ids(value, serialized=value_bytes),
        payload_format=payload_format,
        flow_key=(flow_key.string_value or None) if flow_key is not None else None,
        document_bytes=value_bytes or b"",
    )


def _ready_step_ids(document: Any, *, serialized: bytes | None = None) -> tuple[str, ...]:
    """READY CHART_EXPORT step ids of a `SkimDocument`, as `core.step.selection` chooses them from
    the candidate steps' summaries. `serialized`, the document's bytes, lets most events skip
    the per-step scan.

    Raises PoisonEvent when the document has no `steps` map (it is not a flow_run).
    """
    steps_value = document.fields.get("steps")
    if steps_value is None:
        raise PoisonEvent("document has no steps field: not a flow_run")
    if not steps_value.HasField("map_value"):
        raise PoisonEvent("document field steps is not a map: not a flow_run")
    if serialized is not None and not (names_a_handled_type(serialized) and _READY_BYTES in serialized):
        return ()  # neither word anywhere: no step can match (the usual no-op)
    candidates = map(_parse_step_entry, _candidate_entries(steps_value.map_value))
    steps = {step_id: _summary(step_fields) for step_id, step_fields in candidates}
    return tuple(ready_step_ids_in(steps))


def _candidate_entries(skim_map: Any) -> list[bytes]:
    """Serialized step entries that contain both words: protobuf stores strings verbatim,
    so a READY CHART_EXPORT step cannot be elsewhere. (Firestore never repeats a map key on
    the wire, so an entry is never overridden by a later one.)"""
    return list(filter(mentions_a_handled_type, filter(_mentions_ready, list(skim_map.entries))))


def _parse_step_entry(entry_bytes: bytes) -> tuple[str, Any]:
    """(step id, the step's fields) of one serialized `steps` entry, with the real types."""
    try:
        entry = SkimMapEntry.FromString(entry_bytes)
        return entry.key, RawValue.FromString(entry.value).map_value.fields
    except DecodeError:
        # the full parser would reject the whole document for this
        raise PoisonEvent("document is corrupt: a steps entry does not parse") from None


def _summary(step_fields: Any) -> dict[str, str]:
    """The step's two string fields the core's predicate reads; a step that is not a map
    reads as an empty map, a non-string field as "": simply not READY."""
    return {
        name: value.string_value
        for name in ("status", "stepType")
        if (value := step_fields.get(name)) is not None
    }
