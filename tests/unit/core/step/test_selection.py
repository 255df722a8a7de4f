from __future__ import annotations

import pytest

from harness.builders import chart_step, flow_run
from worker_chart_export.core.exceptions import StepSelectionError
from worker_chart_export.core.step.selection import choose_step, ready_chart_export_step_ids


def test_first_ready_chart_export_step_by_sorted_id() -> None:
    doc = flow_run(
        {
            "z_charts": chart_step(),
            "b_charts": chart_step(),
            "a_charts": chart_step(status="RUNNING"),
            "a_llm": {"stepType": "LLM_REPORT", "status": "READY"},
        }
    )
    assert ready_chart_export_step_ids(doc) == ["b_charts", "z_charts"]
    assert choose_step(doc) == "b_charts"


@pytest.mark.parametrize("status", ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED"])
def test_no_ready_step_means_none(status: str) -> None:
    assert choose_step(flow_run({"c": chart_step(status=status)})) is None


def test_malformed_steps_are_ignored_not_fatal() -> None:
    assert choose_step({"runId": "r", "steps": {"x": "not a step", "y": None}}) is None
    assert choose_step({"runId": "r", "steps": []}) is None


def test_explicit_step_id_must_exist_and_be_chart_export() -> None:
    doc = flow_run(
        {"charts": chart_step(status="SUCCEEDED"), "llm": {"stepType": "LLM_REPORT", "status": "READY"}}
    )
    assert choose_step(doc, "charts") == "charts"  # the claim, not selection, decides on status
    with pytest.raises(StepSelectionError, match=r"'missing' not found.*charts, llm"):
        choose_step(doc, "missing")
    with pytest.raises(StepSelectionError, match="stepType 'LLM_REPORT', expected 'CHART_EXPORT'"):
        choose_step(doc, "llm")


def test_a_step_asked_of_a_run_without_steps_says_there_are_none() -> None:
    with pytest.raises(StepSelectionError) as refused:
        choose_step({"steps": {}}, "charts")
    assert str(refused.value) == "step 'charts' not found in flow_run (steps: none)"
