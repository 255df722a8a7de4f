"""Following one flow_run in the stack: its step statuses as they change, the stand-in for
steps no worker here handles, and the compact table the live view shows.

`--simulate-other-steps` (on by default in the stack): a READY step whose type has no worker
in this stack (OHLCV_EXPORT, LLM_REPORT...) is taken READY -> RUNNING -> SUCCEEDED by the
stack itself, its outputs saying so (`simulatedBy`), so the run can settle; with
--keep-running, in every run of the stack's Firestore (`submit` to a running stack too).
Both writes are conditional on the version they were read from, like any worker's would be.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from worker_chart_export.core.documents import FlowRunDocument, StepDocument, as_flow_run
from worker_chart_export.core.flow.run_progress import StatusChange, is_finished, status_changes
from worker_chart_export.core.step.step_rules import steps_of
from worker_chart_export.core.step.step_types import handles

if TYPE_CHECKING:
    from google.cloud import firestore

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
    change: StatusChange

    def text(self) -> Text:
        change = self.change
        line = Text(f"{self.seconds:6.1f}s  {change.what}: {change.old or '-'} -> ")
        line.append(str(change.new), style=_STYLES.get(str(change.new), ""))
        if change.attempt_text:
            line.append(f"  {change.attempt_text}", style="dim")
        return line


@dataclass
class RunWatch:
    reference: firestore.DocumentReference
    simulate_other_steps: bool = True
    started: float = field(default_factory=time.monotonic)
    document: FlowRunDocument | None = None  # None: not read yet, or no such run
    simulated: set[str] = field(default_factory=set)

    @property
    def run_status(self) -> str | None:
        status = self.document.get("status") if self.document is not None else None
        return str(status) if status is not None else None

    @property
    def settled(self) -> bool:
        return is_finished(self.document)

    def steps(self) -> Mapping[str, StepDocument]:
        return steps_of(self.document)

    def poll(self) -> list[Change]:
        """Read the run once; what changed since the last read (and simulate, if asked)."""
        snapshot = self.reference.get()
        before, self.document = self.document, as_flow_run(snapshot.to_dict()) if snapshot.exists else None
        seconds = time.monotonic() - self.started
        changes = [Change(seconds, change) for change in status_changes(before, self.document)]
        if self.simulate_other_steps:
            simulated = complete_other_step(snapshot)
            if simulated is not None:
                self.simulated.add(simulated)
        return changes

    def table(self) -> Table:
        elapsed = time.monotonic() - self.started
        run_id = self.document.get("runId", self.reference.id) if self.document else self.reference.id
        title = Text(f"flow_run {run_id}  ")
        title.append(self.run_status or "-", style=_STYLES.get(self.run_status or "", ""))
        title.append(f"  {elapsed:.1f}s", style="dim")
        table = Table(title=title, title_justify="left", expand=False)
        for column in ("step", "type", "status", "attempt"):
            table.add_column(column, no_wrap=True)
        # a narrow terminal folds the note onto more lines rather than cut it: a gs:// URI
        # stays whole (to copy it, join the lines; the final lines print it on one)
        table.add_column("note", overflow="fold")
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


def complete_other_step(snapshot: Any) -> str | None:
    """The stand-in's one write per read: the first READY step of a type no worker here
    handles, taken READY -> RUNNING -> SUCCEEDED on this version of its run (a Firestore
    DocumentSnapshot). Its id; None when there is none, the run is finished, or the
    document moved on first (the next read looks again)."""
    document = as_flow_run(snapshot.to_dict()) if snapshot.exists else None
    if document is None or is_finished(document):
        return None
    for step_id, step in sorted(steps_of(document).items()):
        if handles(step) or step.get("status") != "READY":
            continue
        return step_id if _complete_step(snapshot.reference, step_id, step, snapshot.update_time) else None
    return None


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
