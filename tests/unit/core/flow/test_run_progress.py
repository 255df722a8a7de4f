"""core/flow/run_progress.py: what a person following a run sees change between two reads."""

from __future__ import annotations

from typing import Any

import pytest

from worker_chart_export.core.flow.run_progress import (
    StatusChange,
    chart_manifests,
    is_finished,
    status_changes,
)
from worker_chart_export.core.step.step_rules import steps_of


def run(status: str | None, **steps: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"steps": steps}
    if status is not None:
        doc["status"] = status
    return doc


@pytest.mark.parametrize(
    ("status", "finished"),
    [
        ("SUCCEEDED", True),
        ("FAILED", True),
        ("CANCELLED", True),
        ("RUNNING", False),
        ("PENDING", False),
        (None, False),
    ],
)
def test_a_run_is_finished_only_in_a_terminal_status(status: str | None, finished: bool) -> None:
    assert is_finished(run(status)) is finished


def test_steps_of_a_run_without_a_steps_mapping_is_empty() -> None:
    assert steps_of({"steps": ["a"]}) == {} and steps_of({}) == {}
    assert steps_of({"steps": {"a": {}}}) == {"a": {}}


def test_the_runs_change_comes_first_then_each_steps_by_id() -> None:
    before = run("PENDING", b={"status": "PENDING"}, a={"status": "PENDING"})
    after = run("RUNNING", b={"status": "READY"}, a={"status": "READY", "attempt": 0})
    assert status_changes(before, after) == [
        StatusChange(None, "PENDING", "RUNNING"),
        StatusChange("a", "PENDING", "READY", 0),
        StatusChange("b", "PENDING", "READY", None),
    ]


def test_an_attempt_change_alone_is_a_change_and_nothing_else_is() -> None:
    before = run("RUNNING", a={"status": "RUNNING", "attempt": 1, "x": 1}, b={"status": "READY"})
    after = run("RUNNING", a={"status": "RUNNING", "attempt": 2, "x": 2}, b={"status": "READY"})
    assert status_changes(before, after) == [StatusChange("a", "RUNNING", "RUNNING", 2)]
    assert status_changes(after, after) == []


def test_a_new_step_changes_from_nothing_and_malformed_steps_are_skipped() -> None:
    before = run("RUNNING", bad={"status": "READY"})
    after = run("RUNNING", new={"status": "READY"}, bad="not a mapping")
    assert status_changes(before, after) == [StatusChange("new", None, "READY", None)]
    assert status_changes(run("RUNNING", s="junk"), run("RUNNING", s={"status": "READY"})) == []


def test_no_run_is_none_a_run_seen_after_or_before_it_changes_from_or_to_nothing() -> None:
    # None: not read yet, or deleted (submit --wait, the stack's watch)
    seen = run("RUNNING", a={"status": "READY", "attempt": 1})
    assert status_changes(None, seen) == [
        StatusChange(None, None, "RUNNING"),
        StatusChange("a", None, "READY", 1),
    ]
    assert status_changes(seen, None) == [StatusChange(None, "RUNNING", None)]
    assert status_changes(None, None) == []
    assert is_finished(None) is False and chart_manifests(None) == {} and steps_of(None) == {}


def test_a_change_describes_itself_as_a_person_reads_it() -> None:
    assert StatusChange(None, None, "RUNNING").describe() == "run: - -> RUNNING"
    assert StatusChange("charts_1h", "READY", "RUNNING", 1).describe() == "charts_1h: READY -> RUNNING"
    assert StatusChange("s", "READY", "RUNNING", 2).attempt_text == "(attempt 2)"
    assert StatusChange("s", "READY", "RUNNING", 0).attempt_text == ""
    assert StatusChange("s", "READY", "RUNNING").attempt_text == ""


def test_chart_manifests_names_each_chart_export_step_with_a_manifest_by_id() -> None:
    flow = run(
        "RUNNING",
        z={"stepType": "CHART_EXPORT", "outputs": {"outputsManifestGcsUri": "gs://b/z.json"}},
        a={"stepType": "CHART_EXPORT", "outputs": {"outputsManifestGcsUri": "gs://b/a.json"}},
        other={"stepType": "LLM_REPORT", "outputs": {"outputsManifestGcsUri": "gs://b/o.json"}},
        empty={"stepType": "CHART_EXPORT", "outputs": {"outputsManifestGcsUri": ""}},
        number={"stepType": "CHART_EXPORT", "outputs": {"outputsManifestGcsUri": 7}},
        no_outputs={"stepType": "CHART_EXPORT", "outputs": "x"},
        junk="not a step",
    )
    assert list(chart_manifests(flow).items()) == [("a", "gs://b/a.json"), ("z", "gs://b/z.json")]
