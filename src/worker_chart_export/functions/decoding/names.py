"""Which flow_run an event is about: its runId, from the event's `subject` (or `document`)
attribute and the payload's document name, which must agree, and which must be an id Firestore
can hold (a forged id is poison)."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol
from urllib.parse import unquote

from worker_chart_export.core.document_ids import document_id_problem
from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.core.naming import FLOW_RUNS_COLLECTION
from worker_chart_export.functions.decoding.payload import excerpt


class CloudEventLike(Protocol):
    """What we need from `cloudevents.http.CloudEvent` (attributes by name, and data)."""

    data: Any

    def get(self, key: str, default: Any = None) -> Any: ...


def resolve_run_id(cloud_event: CloudEventLike, document_name: str) -> str:
    """The event's runId, which must be an id Firestore can hold: such an id is never sent by
    Firestore, and its client would reject it on every redelivery."""
    run_id = _named_run_id(cloud_event, document_name)
    problem = document_id_problem(run_id)
    if problem is not None:
        raise PoisonEvent(f"runId {excerpt(run_id)}: {problem}")
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
    if payload_run_id is None:
        return unquote(attribute_run_id)  # decoded once, as the binding encodes it
    if payload_run_id in attribute_readings(attribute_run_id):
        return payload_run_id  # the payload's name is the id itself, never decoded
    raise PoisonEvent(
        f"{attribute_source} names flow_runs/{attribute_run_id} but the payload is {payload_path}"
    )


def attribute_readings(value: str) -> set[str]:
    """The ids an attribute's value may stand for, each decoded at most once: as received
    (the emulator sends ids as they are), percent-decoded once (the CloudEvents HTTP binding
    percent-encodes a header's `%`, space, `"` and every character outside printable ASCII),
    and a header's UTF-8 bytes that the server read as Latin-1 (WSGI's rule) read as UTF-8.
    Never decoded twice: `run%2541` stands for `run%41`, not `runA`."""
    readings = {value, unquote(value)}
    with contextlib.suppress(UnicodeError):  # not Latin-1 text, or not UTF-8 bytes: no such reading
        readings.add(value.encode("latin-1").decode("utf-8"))
    return readings


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


def _flow_run_id(path: str, source: str) -> str:
    segments = path.split("/")
    if len(segments) != 2 or segments[0] != FLOW_RUNS_COLLECTION or not segments[1]:
        raise PoisonEvent(f"{source} {path!r} is not a {FLOW_RUNS_COLLECTION}/{{runId}} document")
    return segments[1]
