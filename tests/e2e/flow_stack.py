"""The whole flow on this machine, as `worker-chart-export stack up` runs it: the Firestore
emulator's real triggers go through the stack's router to advance_flow (every write: created,
updated, deleted) and the worker (updates), each served in its own process; the reaper is
POSTed every second.

The router records every event it delivered (trigger, document, body): the tests count
invocations there, and decode the bodies into the document's history (each event carries
one version of the document: the history of statuses the functions saw).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from e2e.stack import wait_until as wait_until  # re-exported: one wait for every e2e test
from worker_chart_export.functions.decoding.versions import decode_document_version
from worker_chart_export.tools.devstack.router import Delivery
from worker_chart_export.tools.devstack.stack import LocalStack, StackOptions

ADVANCE_TRIGGER, WORKER_TRIGGER = "advance-flow", "chart-worker"


@contextmanager
def running_stack(tmp_dir: Path, **options: Any) -> Iterator[LocalStack]:
    stack = LocalStack(StackOptions(log_dir=tmp_dir / "logs", reaper_interval_seconds=1.0, **options))
    try:
        stack.start()
    except Exception as exc:
        pytest.fail(f"the stack did not start: {exc}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()
        assert not [child.name for child in stack.supervisor.children if child.alive()]


def new_run_id(label: str) -> str:
    return f"flow_{label}_{uuid.uuid4().hex[:10]}"


def subject(run_id: str) -> str:
    return f"documents/flow_runs/{run_id}"


class DeliveredEvent:
    """What decode_document_version reads from a CloudEvent: data and attributes."""

    def __init__(self, delivery: Delivery) -> None:
        self.data = delivery.body
        self._attributes = {
            name.lower().removeprefix("ce-"): value for name, value in delivery.headers.items()
        }

    def get(self, name: str, default: Any = None) -> Any:
        return self._attributes.get(name, default)

    def __getitem__(self, name: str) -> Any:
        return self._attributes[name]


def as_delivered(delivery: Delivery) -> tuple[bytes, dict[str, str]]:
    """An event the emulator delivered, to send again: its CloudEvent headers and body."""
    kept = {
        name: value
        for name, value in delivery.headers.items()
        if name.lower().startswith("ce-") or name.lower() == "content-type"
    }
    return delivery.body, kept


def versions(stack: LocalStack, run_id: str) -> list[tuple[datetime, dict[str, Any]]]:
    """Every version of the run the triggers carried, oldest first (by update time: the
    router records an event when its function answered, not when it was sent)."""
    seen: dict[datetime, dict[str, Any]] = {}
    for delivery in stack.router.delivered(ADVANCE_TRIGGER, subject(run_id)):
        version = decode_document_version(DeliveredEvent(delivery))
        assert version.update_time is not None and version.document is not None
        seen[version.update_time] = version.document
    return sorted(seen.items())


def settled(stack: LocalStack, run_id: str) -> bool:
    """Nothing more will happen to the run: its document is at the version the last events
    carried, answered by advance_flow (every write) and the worker (every update). Our
    functions write before they answer, and the router records an event once answered, so a
    write still to come (a loop: a function answering its own write) would leave the document
    newer than every answered event. Judged by events, however long anything takes."""
    snapshot = stack.flow_run_ref(run_id).get()
    current = snapshot.update_time
    triggers = [ADVANCE_TRIGGER] if snapshot.create_time == current else [ADVANCE_TRIGGER, WORKER_TRIGGER]
    for trigger in triggers:
        answered = [
            decode_document_version(DeliveredEvent(d))
            for d in stack.router.delivered(trigger, subject(run_id))
        ]
        if current not in {version.update_time for version in answered}:
            return False
    return True


def history(stack: LocalStack, run_id: str, step_id: str | None) -> list[str]:
    """A step's (or, for None, the run's) statuses across the versions, repeats collapsed."""
    statuses: list[str] = []
    for _, document in versions(stack, run_id):
        status = document["status"] if step_id is None else document["steps"][step_id]["status"]
        if not statuses or statuses[-1] != status:
            statuses.append(status)
    return statuses


def step_status(stack: LocalStack, run_id: str, step_id: str) -> str | None:
    document = stack.flow_run_ref(run_id).get().to_dict() or {}
    return document.get("steps", {}).get(step_id, {}).get("status")


def log_tails(stack: LocalStack) -> str:
    return "\n".join(f"--- {c.name}:\n{c.log_tail(1500)}" for c in stack.supervisor.children)


def copy_fixtures(destination: Path) -> Path:
    from worker_chart_export import bundled

    shutil.copytree(bundled.fixtures_dir() / "chart-api", destination)
    return destination
