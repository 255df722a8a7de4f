"""Following one flow_run in the stack: its step statuses as they change, the stand-in for
steps no worker here handles, and the compact table the live view shows.

`--simulate-other-steps` (on by default in the stack): a READY step whose type has no worker
in this stack (OHLCV_EXPORT, LLM_REPORT...) is taken READY -> RUNNING -> SUCCEEDED by the
stack itself, its outputs saying so (`simulatedBy`), so the run can settle. Both writes are
conditional on the version they were read from, like any worker's would be.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from google.cloud import firestore

SETTLED_RUN_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
HANDLED_STEP_TYPES = frozenset({"CHART_EXPORT"})  # the worker this stack serves
SIMULATED_BY = "worker-chart-export stack --simulate-other-steps"
_STYLES = {
    "PENDING": "dim",
    "READY": "cyan",
    "RUNNING": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "magenta",
    "SKIPPED": "dim",
}


@dataclass(frozen=True)
class Change:
    seconds: float  # since the watch started
    step_id: str | None  # None: the run's own status
    old: str | None
    new: str | None
    attempt: Any = None

    def text(self) -> Text:
        what = "run" if self.step_id is None else self.step_id
        line = Text(f"{self.seconds:6.1f}s  {what}: {self.old or '-'} -> ")
        line.append(str(self.new), style=_STYLES.get(str(self.new), ""))
        if self.attempt not in (None, 0):
            line.append(f"  (attempt {self.attempt})", style="dim")
        return line


@dataclass
class RunWatch:
    reference: firestore.DocumentReference
    simulate_other_steps: bool = True
    started: float = field(default_factory=time.monotonic)
    document: dict[str, Any] = field(default_factory=dict)
    simulated: set[str] = field(default_factory=set)

    @property
    def run_status(self) -> str | None:
        status = self.document.get("status")
        return str(status) if status is not None else None

    @property
    def settled(self) -> bool:
        return self.run_status in SETTLED_RUN_STATUSES

    def steps(self) -> Mapping[str, Mapping[str, Any]]:
        steps = self.document.get("steps")
        return steps if isinstance(steps, Mapping) else {}

    def poll(self) -> list[Change]:
        """Read the run once; what changed since the last read (and simulate, if asked)."""
        snapshot = self.reference.get()
        before, self.document = self.document, snapshot.to_dict() or {}
        changes = _changes(before, self.document, time.monotonic() - self.started)
        if self.simulate_other_steps and not self.settled:
            self._simulate(snapshot)
        return changes

    def _simulate(self, snapshot: Any) -> None:
        for step_id, step in sorted(self.steps().items()):
            if step.get("stepType") in HANDLED_STEP_TYPES or step.get("status") != "READY":
                continue
            if _complete_step(self.reference, step_id, step, snapshot.update_time):
                self.simulated.add(step_id)
            return  # one write per read: the next poll sees the new version

    def table(self) -> Table:
        elapsed = time.monotonic() - self.started
        run_id = self.document.get("runId", self.reference.id)
        title = Text(f"flow_run {run_id}  ")
        title.append(self.run_status or "-", style=_STYLES.get(self.run_status or "", ""))
        title.append(f"  {elapsed:.1f}s", style="dim")
        table = Table(title=title, title_justify="left", expand=False)
        for column in ("step", "type", "status", "attempt", "note"):
            table.add_column(column)
        for step_id, step in sorted(self.steps().items(), key=lambda item: _order(item[1])):
            status = str(step.get("status", "-"))
            table.add_row(
                step_id,
                str(step.get("stepType", "-")),
                Text(status, style=_STYLES.get(status, "")),
                str(step.get("attempt", "-")),
                _note(step_id, step, self.simulated),
            )
        return table


def _order(step: Mapping[str, Any]) -> int:
    depends = step.get("dependsOn")
    return len(depends) if isinstance(depends, list) else 0


def _note(step_id: str, step: Mapping[str, Any], simulated: set[str]) -> str:
    outputs = step.get("outputs") if isinstance(step.get("outputs"), Mapping) else {}
    error = step.get("error") if isinstance(step.get("error"), Mapping) else None
    if error:
        return f"{error.get('code', '')}: {str(error.get('message', ''))[:60]}"
    if (isinstance(outputs, Mapping) and outputs.get("simulatedBy")) or step_id in simulated:
        return "simulated stand-in (--simulate-other-steps)"
    if isinstance(outputs, Mapping) and outputs.get("outputsManifestGcsUri"):
        return str(outputs["outputsManifestGcsUri"])
    return ""


def _changes(before: Mapping[str, Any], after: Mapping[str, Any], seconds: float) -> list[Change]:
    changes = []
    if before.get("status") != after.get("status"):
        changes.append(Change(seconds, None, before.get("status"), after.get("status")))
    old_steps = before.get("steps") if isinstance(before.get("steps"), Mapping) else {}
    new_steps = after.get("steps") if isinstance(after.get("steps"), Mapping) else {}
    assert isinstance(old_steps, Mapping) and isinstance(new_steps, Mapping)
    for step_id, step in sorted(new_steps.items()):
        old = old_steps.get(step_id, {})
        if not isinstance(step, Mapping) or not isinstance(old, Mapping):
            continue
        if old.get("status") != step.get("status") or old.get("attempt") != step.get("attempt"):
            changes.append(
                Change(seconds, step_id, old.get("status"), step.get("status"), step.get("attempt"))
            )
    return changes


def _complete_step(
    reference: firestore.DocumentReference, step_id: str, step: Mapping[str, Any], update_time: Any
) -> bool:
    """READY -> RUNNING -> SUCCEEDED, each write conditional on the version before it;
    False when the document moved on first (the next poll looks again)."""
    from google.api_core.exceptions import FailedPrecondition
    from google.cloud.firestore_v1.field_path import FieldPath

    def path(name: str) -> str:
        return str(FieldPath("steps", step_id, name).to_api_repr())

    client = reference._client
    attempt = int(step.get("attempt") or 0) + 1
    try:
        result = reference.update(
            {path("status"): "RUNNING", path("attempt"): attempt, path("startedAt"): _now()},
            option=client.write_option(last_update_time=update_time),
        )
        reference.update(
            {
                path("status"): "SUCCEEDED",
                path("finishedAt"): _now(),
                path("outputs"): {"simulatedBy": SIMULATED_BY},
            },
            option=client.write_option(last_update_time=result.update_time),
        )
    except FailedPrecondition:
        return False
    return True


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
