"""Helpers for tests and benchmarks, shipped with the package (as procrastinate ships its
in-memory connector): a clock driven by hand, encoders that build Firestore events the way
Firestore does, and the in-memory stores behind the real ports (`InMemoryFlowRuns`, with the
reaper's leases, in flow_runs.py; `InMemoryUsageStore` in usage.py). Nothing in the service
imports this package.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from worker_chart_export.functions.decoding.skim import RawDocumentEventData, RawValue
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns as InMemoryFlowRuns
from worker_chart_export.testing.usage import InMemoryUsageStore as InMemoryUsageStore


class FakeClock:
    """Wall time, monotonic time and sleep that move together, only when told to.

    `sleep` records what it was asked and advances time at once; `advance` moves time
    without recording a sleep.
    """

    MONOTONIC_START = 1000.0

    def __init__(self, start: datetime | None = None) -> None:
        self.start = start or datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
        self.elapsed = 0.0
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self.start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        with self._lock:
            return self.MONOTONIC_START + self.elapsed

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.elapsed += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.elapsed += seconds


# --- Firestore events, encoded the way Firestore encodes them --------------------------------


def python_to_firestore_value(value: Any) -> Any:
    """Plain Python -> raw Firestore `Value`: the inverse of `events.firestore_value_to_python`."""
    result = RawValue()
    if value is None:
        result.null_value = 0
    elif isinstance(value, bool):  # before int: bool is an int
        result.boolean_value = value
    elif isinstance(value, int):
        result.integer_value = value
    elif isinstance(value, float):
        result.double_value = value
    elif isinstance(value, str):
        result.string_value = value
    elif isinstance(value, bytes):
        result.bytes_value = value
    elif isinstance(value, datetime):
        result.timestamp_value.FromDatetime(value)
    elif isinstance(value, Mapping):
        result.map_value.SetInParent()  # an empty map is still a map
        for name, item in value.items():
            result.map_value.fields[name].CopyFrom(python_to_firestore_value(item))
    elif isinstance(value, Sequence):
        result.array_value.SetInParent()
        result.array_value.values.extend(python_to_firestore_value(item) for item in value)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as a Firestore value")
    return result


def document_resource_name(project: str, path: str, database: str = "(default)") -> str:
    return f"projects/{project}/databases/{database}/documents/{path}"


def build_document_event_data(
    document_name: str,
    fields: Mapping[str, Any] | None,
    old_fields: Mapping[str, Any] | None = None,
) -> Any:
    """A raw DocumentEventData as Firestore sends it: `fields=None` is a delete,
    `old_fields=None` a create. `.SerializeToString()` gives the production payload."""
    event_data = RawDocumentEventData()
    for target, source in ((event_data.value, fields), (event_data.old_value, old_fields)):
        if source is None:
            continue
        target.name = document_name
        for name, value in source.items():
            target.fields[name].CopyFrom(python_to_firestore_value(value))
    return event_data


def binary_update_event(
    project: str,
    run_id: str,
    document: Mapping[str, Any],
    event_id: str,
    *,
    update_time: datetime | None = None,
) -> tuple[bytes, dict[str, str]]:
    """An update of `flow_runs/{run_id}` as production Eventarc delivers it: a binary-mode
    CloudEvent whose body is the raw protobuf DocumentEventData. Returns (body, headers)."""
    name = document_resource_name(project, f"flow_runs/{run_id}")
    data = build_document_event_data(name, document, document)
    if update_time is not None:
        data.value.update_time.FromDatetime(update_time)
    headers = {
        "ce-id": event_id,
        "ce-source": f"//firestore.googleapis.com/projects/{project}/databases/(default)",
        "ce-type": "google.cloud.firestore.document.v1.updated",
        "ce-specversion": "1.0",
        "ce-subject": f"documents/flow_runs/{run_id}",
        "ce-document": f"flow_runs/{run_id}",
        "content-type": "application/protobuf",
    }
    return data.SerializeToString(), headers
