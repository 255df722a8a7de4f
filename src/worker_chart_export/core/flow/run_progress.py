"""How a flow_run moved between two reads: the status changes a person following it wants to
see (`submit --wait`, the stack's live view), and where its charts are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.flow.flow_rules import TERMINAL_RUN_STATUSES
from worker_chart_export.core.step.step_rules import steps_of
from worker_chart_export.core.step.step_types import handles

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument

MANIFEST_OUTPUT = "outputsManifestGcsUri"


@dataclass(frozen=True)
class StatusChange:
    step_id: str | None  # None: the run's own status
    old: str | None
    new: str | None
    attempt: Any = None

    @property
    def what(self) -> str:
        return "run" if self.step_id is None else self.step_id

    def describe(self) -> str:
        """`charts_1h: READY -> RUNNING` (the attempt, when there is one, is `attempt_text`)."""
        return f"{self.what}: {self.old or '-'} -> {self.new}"

    @property
    def attempt_text(self) -> str:
        return "" if self.attempt in (None, 0) else f"(attempt {self.attempt})"


def _status(flow_run: FlowRunDocument | None) -> str | None:
    return flow_run.get("status") if flow_run is not None else None


def is_finished(flow_run: FlowRunDocument | None) -> bool:
    """The run's status is terminal: SUCCEEDED, FAILED or CANCELLED (None: no such run)."""
    return _status(flow_run) in TERMINAL_RUN_STATUSES


def status_changes(before: FlowRunDocument | None, after: FlowRunDocument | None) -> list[StatusChange]:
    """The run's status change, then each step's (status or attempt), steps by id (None: no
    such run, as before the first read or once it is deleted)."""
    changes = []
    if _status(before) != _status(after):
        changes.append(StatusChange(None, _status(before), _status(after)))
    old_steps = steps_of(before)
    for step_id, step in sorted(steps_of(after).items()):
        old = old_steps.get(step_id)
        if not isinstance(step, Mapping) or not isinstance(old, Mapping | None):
            continue
        old_status, old_attempt = (old.get("status"), old.get("attempt")) if old is not None else (None, None)
        if old_status != step.get("status") or old_attempt != step.get("attempt"):
            changes.append(StatusChange(step_id, old_status, step.get("status"), step.get("attempt")))
    return changes


def chart_manifests(flow_run: FlowRunDocument | None) -> dict[str, str]:
    """CHART_EXPORT step id -> the manifest URI its outputs name, for the steps that have one."""
    found = {}
    for step_id, step in sorted(steps_of(flow_run).items()):
        if not isinstance(step, Mapping):
            continue  # a malformed step names no manifest (and must not stop the watch)
        outputs = step.get("outputs")
        uri = outputs.get(MANIFEST_OUTPUT) if isinstance(outputs, Mapping) else None
        if handles(step) and isinstance(uri, str) and uri:
            found[step_id] = uri
    return found
