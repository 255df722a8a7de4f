"""A Firestore event's new document converted whole, with its update time: the version
advance_flow plans from, and the one the worker's claim is planned from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from google.protobuf.message import DecodeError

from worker_chart_export.core.documents import FlowRunDocument, as_flow_run
from worker_chart_export.core.exceptions import PoisonEvent, UndecodableValue
from worker_chart_export.functions.decoding.names import CloudEventLike, resolve_run_id
from worker_chart_export.functions.decoding.payload import split_event_payload
from worker_chart_export.functions.decoding.skim import RawDocument
from worker_chart_export.functions.decoding.values import document_to_python, timestamp_to_datetime


@dataclass(frozen=True)
class DocumentVersion:
    """One version of a flow_run as an event carries it (advance_flow reads all of it)."""

    run_id: str
    document: FlowRunDocument | None  # None: the document was deleted
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
    run_id = resolve_run_id(cloud_event, named.name)
    if current is None:
        return DocumentVersion(run_id, None, None)
    try:
        updated = timestamp_to_datetime(current.update_time) if current.HasField("update_time") else None
        document = as_flow_run(document_to_python(current))
    except UndecodableValue as exc:
        raise PoisonEvent(f"the document holds a timestamp Firestore never writes: {exc}") from None
    return DocumentVersion(run_id, document, updated, created=previous is None)
