"""advance_flow's rules on hand-picked flow_runs: each case of docs/flow_rules.md, one by one."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN
from worker_chart_export.bundled.contracts import FLOW_RUN, schema_errors
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.flow.flow_graph import cycle_step_ids, find_problems
from worker_chart_export.core.flow.flow_rules import (
    AdvancePlan,
    RunStatus,
    apply_plan,
    as_new_run,
    is_forward,
    plan_advance,
    run_status_rank,
)


def run(status: str = "RUNNING", **steps: Any) -> dict[str, Any]:
    """A flow_run whose steps are given as id=(status, [deps]) or id=<any value> (malformed)."""
    built = {}
    for step_id, spec in steps.items():
        if isinstance(spec, tuple):
            step_status, deps = spec
            built[step_id] = {"stepType": "OHLCV_EXPORT", "status": step_status, "dependsOn": deps}
        else:
            built[step_id] = spec
    return {"runId": "r1", "flowKey": "f", "status": status, "scope": {"symbol": "BTCUSDT"}, "steps": built}


def sample() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(SAMPLE_FLOW_RUN.read_text())
    return doc


def settle(doc: dict[str, Any]) -> tuple[AdvancePlan, dict[str, Any]]:
    plan = plan_advance(doc)
    return plan, apply_plan(doc, plan)


# --- advancing and the run status ---------------------------------------------------------------


def test_sample_is_stable_while_its_chart_step_is_ready() -> None:
    plan = plan_advance(sample())
    assert not plan.changed and plan.ready_step_ids == () and plan.run_status is None


def test_sample_advances_the_report_once_the_charts_succeed() -> None:
    doc = sample()
    doc["steps"]["charts_1h"]["status"] = "SUCCEEDED"
    plan, after = settle(doc)
    assert plan.ready_step_ids == ("llm_report",) and plan.run_status is None
    assert after["steps"]["llm_report"]["status"] == "READY"
    assert schema_errors(FLOW_RUN, after) == []


def test_a_new_run_makes_its_roots_ready_and_starts_running() -> None:
    doc = run("PENDING", b=("PENDING", ["a"]), a=("PENDING", []), c=("PENDING", []))
    plan = plan_advance(doc)
    assert plan.ready_step_ids == ("a", "c") and plan.run_status == "RUNNING"


def test_missing_depends_on_means_no_dependencies() -> None:
    doc = run("PENDING", a={"stepType": "X", "status": "PENDING"})
    assert plan_advance(doc).ready_step_ids == ("a",)


def test_skipped_counts_as_done_for_a_diamond() -> None:
    doc = run(
        a=("SUCCEEDED", []),
        b=("SKIPPED", ["a"]),
        c=("RUNNING", ["a"]),
        d=("PENDING", ["b", "c"]),
    )
    assert plan_advance(doc).ready_step_ids == ()
    doc["steps"]["c"]["status"] = "SUCCEEDED"
    plan = plan_advance(doc)
    assert plan.ready_step_ids == ("d",) and plan.run_status is None


@pytest.mark.parametrize("last", ["SUCCEEDED", "SKIPPED"])
def test_all_done_succeeds(last: str) -> None:
    plan = plan_advance(run(a=("SUCCEEDED", []), b=(last, ["a"])))
    assert plan.run_status == "SUCCEEDED" and plan.ready_step_ids == () and plan.run_error is None


def test_no_steps_at_all_is_vacuously_succeeded() -> None:
    assert plan_advance(run("PENDING")).run_status == "SUCCEEDED"


def test_a_failed_step_fails_the_run_at_once_and_stops_advancing() -> None:
    doc = run(
        a=("FAILED", []),
        b=("PENDING", ["a"]),
        c=("SUCCEEDED", []),
        d=("PENDING", ["c"]),  # satisfiable, but the run has failed
        e=("RUNNING", []),
    )
    plan, after = settle(doc)
    assert plan.run_status == "FAILED" and plan.ready_step_ids == () and plan.run_error is None
    assert after["steps"]["b"]["status"] == after["steps"]["d"]["status"] == "PENDING"
    assert "a" in plan.reason
    assert not plan_advance(after).changed


def test_a_cancelled_step_blocks_its_dependents_and_the_run_ends_cancelled() -> None:
    doc = run(a=("CANCELLED", []), b=("PENDING", ["a"]), c=("RUNNING", []))
    plan = plan_advance(doc)
    assert plan.ready_step_ids == () and plan.run_status is None  # c still running
    doc["steps"]["c"]["status"] = "SUCCEEDED"
    plan, after = settle(doc)
    assert plan.run_status == "CANCELLED" and plan.ready_step_ids == ()
    assert after["steps"]["b"]["status"] == "PENDING"


def test_a_failed_step_wins_over_a_cancelled_one() -> None:
    plan = plan_advance(run(a=("CANCELLED", []), b=("FAILED", [])))
    assert plan.run_status == "FAILED"


# --- cancel flag and terminal runs --------------------------------------------------------------


def test_cancel_flag_cancels_and_advances_nothing() -> None:
    doc = {**run(a=("PENDING", []), b=("RUNNING", [])), "cancelRequested": True}
    plan, after = settle(doc)
    assert plan.run_status == "CANCELLED" and plan.ready_step_ids == ()
    assert after["steps"] == doc["steps"]
    assert schema_errors(FLOW_RUN, {**sample(), "cancelRequested": True}) == []


def test_cancel_flag_wins_over_an_invalid_document() -> None:
    doc = {**run(a=("PENDING", ["ghost"])), "cancelRequested": True}
    plan = plan_advance(doc)
    assert plan.run_status == "CANCELLED" and plan.run_error is None


def test_cancel_flag_false_is_no_flag() -> None:
    doc = {**run("PENDING", a=("PENDING", [])), "cancelRequested": False}
    assert plan_advance(doc).run_status == "RUNNING"


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_terminal_run_is_final(final: str) -> None:
    doc = {
        **run(final, a=("PENDING", []), b=("FAILED", []), c=("PENDING", ["ghost"])),
        "cancelRequested": True,
    }
    plan = plan_advance(doc)
    assert not plan.changed and final in plan.reason
    assert apply_plan(doc, AdvancePlan("stale", ("a",), run_status=plan_advance(run()).run_status)) == doc


# --- invalid documents --------------------------------------------------------------------------


def test_unknown_dependencies_fail_the_run_naming_them() -> None:
    doc = sample()
    doc["steps"]["llm_report"]["dependsOn"] = ["charts_1h", "charts_4h", "ohlcv_4h"]
    doc["steps"]["charts_1h"]["status"] = "SUCCEEDED"
    plan, after = settle(doc)
    assert plan.run_status == "FAILED" and plan.ready_step_ids == ()
    assert plan.run_error is not None and plan.run_error["code"] == ErrorCode.FLOW_RUN_INVALID
    assert plan.run_error["details"] == {"unknownDependsOn": {"llm_report": ["charts_4h", "ohlcv_4h"]}}
    assert "llm_report" in plan.run_error["message"] and "charts_4h, ohlcv_4h" in plan.run_error["message"]
    assert after["error"] == plan.run_error and after["steps"] == doc["steps"]
    assert schema_errors(FLOW_RUN, after) == []
    assert not plan_advance(after).changed


def test_cycles_name_only_the_steps_on_them() -> None:
    doc = run(
        a=("PENDING", ["b"]),
        b=("PENDING", ["a"]),
        c=("PENDING", ["a"]),  # depends on the cycle, is not on it
        d=("PENDING", ["d"]),  # depends on itself
        e=("SUCCEEDED", []),
    )
    plan = plan_advance(doc)
    assert plan.run_status == "FAILED" and plan.ready_step_ids == ()
    assert plan.run_error is not None and plan.run_error["details"] == {"cycleStepIds": ["a", "b", "d"]}
    assert "a, b, d" in plan.run_error["message"]


def test_cycle_detection_handles_deep_chains_without_recursion() -> None:
    n = 5000
    deps = {f"s{i}": [f"s{i + 1}"] for i in range(n)} | {f"s{n}": ["s0"]}
    assert len(cycle_step_ids(deps)) == n + 1
    deps[f"s{n}"] = []
    assert cycle_step_ids(deps) == ()


@pytest.mark.parametrize(
    ("doc", "fields"),
    [
        ({"status": "RUNNING"}, ["steps"]),
        ({"status": "RUNNING", "steps": ["a"]}, ["steps"]),
        (run(a="junk"), ["steps.a"]),
        (run(a={"stepType": "X"}), ["steps.a.status"]),
        (run(a=("DONE", [])), ["steps.a.status"]),
        (run(a=("PENDING", "b"), b=("PENDING", [])), ["steps.a.dependsOn"]),
        (run(a=("PENDING", None)), ["steps.a.dependsOn"]),
        (run(a=("PENDING", [1])), ["steps.a.dependsOn"]),
        ({**run(a=("PENDING", [])), "status": None}, ["status"]),
        ({**run(a=("PENDING", [])), "cancelRequested": "yes"}, ["cancelRequested"]),
        ({**run(a=("PENDING", [])), "cancelRequested": 1}, ["cancelRequested"]),
        (
            {"steps": {"a": 3, "b": {"dependsOn": {}}}},
            ["status", "steps.a", "steps.b.dependsOn", "steps.b.status"],
        ),
    ],
)
def test_malformed_shapes_fail_the_run_naming_the_field(doc: dict[str, Any], fields: list[str]) -> None:
    before = copy.deepcopy(doc)
    plan = plan_advance(doc)
    assert plan.run_status == "FAILED" and plan.ready_step_ids == ()
    assert plan.run_error is not None and plan.run_error["details"] == {"malformedFields": fields}
    assert all(f in plan.run_error["message"] for f in fields)
    assert doc == before


def test_a_malformed_step_is_still_a_known_dependency() -> None:
    problems = find_problems(run(a=("PENDING", ["b"]), b=["not", "a", "map"]))
    assert problems.malformed_fields == ("steps.b",) and not problems.unknown_depends_on


def test_all_kinds_of_problem_are_reported_together() -> None:
    doc = run(a=("PENDING", ["a", "zz"]), b=("PENDING", 7))
    details = find_problems(doc).details()
    assert details == {
        "malformedFields": ["steps.b.dependsOn"],
        "unknownDependsOn": {"a": ["zz"]},
        "cycleStepIds": ["a"],
    }


def test_repeated_dependency_ids_are_tolerated() -> None:
    doc = run(a=("SUCCEEDED", []), b=("PENDING", ["a", "a"]))
    assert plan_advance(doc).ready_step_ids == ("b",)


# --- applying a plan ----------------------------------------------------------------------------


def test_apply_plan_touches_only_status_and_leaves_the_input_alone() -> None:
    doc = sample()
    doc["steps"]["charts_1h"].update(status="SUCCEEDED", outputs={"outputsManifestGcsUri": "gs://b/m"})
    doc["steps"]["llm_report"]["outputs"] = {"keep": [1, 2]}
    before = copy.deepcopy(doc)
    after = apply_plan(doc, plan_advance(doc))
    assert doc == before
    assert after["steps"]["llm_report"] == {**before["steps"]["llm_report"], "status": "READY"}
    assert {k: v for k, v in after.items() if k != "steps"} == {
        k: v for k, v in before.items() if k != "steps"
    }


def test_apply_plan_never_regresses_a_newer_document() -> None:
    old = run("PENDING", a=("PENDING", []), b=("PENDING", ["a"]))
    stale = plan_advance(old)
    newer = run("RUNNING", a=("RUNNING", []), b=("PENDING", ["a"]))
    assert apply_plan(newer, stale) == newer
    failed_plan = plan_advance(run(a=("FAILED", [])))
    assert apply_plan(run("SUCCEEDED", a=("SUCCEEDED", [])), failed_plan)["status"] == "SUCCEEDED"


def test_updates_are_the_field_paths_to_write() -> None:
    plan = plan_advance(run("PENDING", a=("PENDING", []), b=("PENDING", [])))
    assert plan.updates() == {
        ("steps", "a", "status"): "READY",
        ("steps", "b", "status"): "READY",
        ("status",): "RUNNING",
    }
    invalid = plan_advance(run(a=("PENDING", ["x"])))
    assert set(invalid.updates()) == {("status",), ("error",)}
    assert plan_advance(sample()).updates() == {}


def test_schema_knows_the_cancel_flag_and_the_reaper_code() -> None:
    assert any(
        "cancelRequested" in e for e in schema_errors(FLOW_RUN, {**sample(), "cancelRequested": "yes"})
    )
    doc = sample()
    doc["steps"]["charts_1h"].update(
        status="FAILED", error={"code": ErrorCode.STEP_LEASE_EXPIRED.value, "message": "lease expired"}
    )
    assert schema_errors(FLOW_RUN, doc) == []
    assert plan_advance(doc).run_status == "FAILED"


# --- what a plan says, and what it writes ---------------------------------------------------------


def test_each_plan_says_why_in_its_reason() -> None:
    assert (
        plan_advance({**run(a=("PENDING", [])), "cancelRequested": True}).reason == "cancelRequested is set"
    )
    assert plan_advance(run(b=("FAILED", []), a=("FAILED", []))).reason == "step(s) FAILED: a, b"
    assert plan_advance(run("PENDING", b=("PENDING", []), a=("PENDING", []))).reason == (
        "2 step(s) READY: a, b; run RUNNING"
    )
    assert plan_advance(run(a=("RUNNING", []))).reason == "no step to advance; run RUNNING"
    invalid = plan_advance(run(a=("PENDING", ["x", "y"]), b=("PENDING", 7)))
    assert invalid.reason == (
        "flow_run is invalid: malformed field(s): steps.b.dependsOn; step a depends on unknown step(s): x, y"
    )


def test_every_kind_of_problem_is_in_the_message_in_its_order() -> None:
    problems = find_problems(
        {"status": "RUNNING", "steps": {"c": {"status": "PENDING", "dependsOn": ["c"]}, 5: {}, "b": "x"}}
    )
    assert problems.message() == (
        "flow_run is invalid: malformed field(s): steps.b, steps[5]; dependency cycle through step(s): c"
    )


def test_an_invalid_plan_writes_the_run_error_it_carries() -> None:
    plan = plan_advance(run(a=("PENDING", ["x"])))
    assert plan.run_error is not None and plan.updates()[("error",)] == plan.run_error
    assert plan.run_error["code"] == "FLOW_RUN_INVALID"


def test_a_status_nobody_knows_ranks_below_every_known_one() -> None:
    # A document's status may be any Firestore value: arrays and maps arrive unhashable.
    for unknown in ("WEIRD", None, 5, ["RUNNING"], {"status": "RUNNING"}):
        assert run_status_rank(unknown) == -1
    assert is_forward(["RUNNING"], RunStatus.PENDING) and is_forward({}, RunStatus.RUNNING)
    assert is_forward("WEIRD", RunStatus.PENDING) and not is_forward("RUNNING", RunStatus.PENDING)


def test_apply_plan_never_moves_the_run_status_backward_nor_touches_steps_that_are_not_a_map() -> None:
    backward = AdvancePlan("stale", run_status=RunStatus.PENDING)
    assert apply_plan(run("RUNNING"), backward)["status"] == "RUNNING"
    odd = {**run("RUNNING"), "steps": ["a"]}
    assert apply_plan(odd, AdvancePlan("x", ready_step_ids=("a",))) == odd


def test_a_new_run_is_pending_whatever_it_says() -> None:
    assert as_new_run({"runId": "r", "status": "SUCCEEDED"}) == {"runId": "r", "status": "PENDING"}


def test_a_message_names_only_the_kinds_of_problem_found() -> None:
    assert find_problems(run(a=("PENDING", ["x"]))).message() == (
        "flow_run is invalid: step a depends on unknown step(s): x"
    )
