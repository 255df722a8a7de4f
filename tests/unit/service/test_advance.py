"""advance_version: the plan written on the version it was made from, and the one log line
that says what happened (advance_flow logs `log_fields()` as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.service.advance import AdvanceEffect, advance_version

UPDATE_TIME = datetime(2026, 11, 22, 4, 8, 40, 123456, tzinfo=UTC)


@dataclass
class RecordingAdvanceStore:
    """Answers `written` to every write, and records what it was asked to write."""

    written: bool = True
    writes: list[tuple[str, AdvancePlan, datetime]] = field(default_factory=list)

    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        self.writes.append((run_id, plan, last_update_time))
        return self.written


def run(status: str, steps: dict[str, tuple[str, list[str]]]) -> dict[str, Any]:
    return {
        "runId": "run-7",
        "flowKey": "daily",
        "status": status,
        "scope": {"symbol": "BTC"},
        "steps": {
            sid: {"stepType": "CHART_EXPORT", "status": st, "dependsOn": deps}
            for sid, (st, deps) in steps.items()
        },
    }


def test_a_written_advance_says_which_steps_became_ready_and_the_new_run_status() -> None:
    store = RecordingAdvanceStore()
    doc = run("PENDING", {"b": ("PENDING", []), "a": ("PENDING", []), "c": ("PENDING", ["a"])})
    result = advance_version("run-7", doc, UPDATE_TIME, store)
    assert store.writes == [("run-7", result.plan, UPDATE_TIME)]
    assert result.log_fields() == {
        "runId": "run-7",
        "outcome": "WRITTEN",
        "readySteps": ["a", "b"],
        "runStatus": "RUNNING",
        "error": None,
        "reason": "2 step(s) READY: a, b; run RUNNING",
    }


def test_an_advance_the_document_moved_past_is_stale_and_says_so() -> None:
    store = RecordingAdvanceStore(written=False)
    result = advance_version("run-7", run("PENDING", {"a": ("PENDING", [])}), UPDATE_TIME, store)
    assert len(store.writes) == 1
    assert (result.run_id, result.outcome) == ("run-7", AdvanceEffect.STALE)
    assert result.log_fields()["outcome"] == "STALE"


def test_nothing_to_advance_writes_nothing_and_names_the_run() -> None:
    store = RecordingAdvanceStore()
    result = advance_version("run-7", run("RUNNING", {"a": ("RUNNING", [])}), UPDATE_TIME, store)
    assert store.writes == []
    assert result.log_fields() == {
        "runId": "run-7",
        "outcome": "UNCHANGED",
        "readySteps": [],
        "runStatus": None,
        "error": None,
        "reason": "no step to advance; run RUNNING",
    }


def test_a_failed_run_is_logged_with_its_error() -> None:
    store = RecordingAdvanceStore()
    doc = run("RUNNING", {"a": ("PENDING", ["missing"])})  # a dependency that is no step
    result = advance_version("run-7", doc, UPDATE_TIME, store)
    fields = result.log_fields()
    assert (fields["outcome"], fields["runStatus"]) == ("WRITTEN", "FAILED")
    assert fields["error"] is not None and fields["error"]["code"] == "FLOW_RUN_INVALID"
    assert fields["error"] == result.plan.run_error
