"""Property tests: advance_flow's code against a reference written straight from docs/flow_rules.md.

The reference below is deliberately naive (reachability by search, one rule per line, no shared
helpers with the code). Random DAGs, random graphs with cycles and unknown ids, and randomly
corrupted documents, all with random step statuses, run statuses and cancel flags.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker_chart_export.core.flow.flow_rules import apply_plan, plan_advance

BOUNDED = settings(max_examples=200, deadline=None)

STEP_STATUSES = ["PENDING", "READY", "RUNNING", "SUCCEEDED", "FAILED", "SKIPPED", "CANCELLED"]
RUN_STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
RUN_ORDER = {"PENDING": 0, "RUNNING": 1, "SUCCEEDED": 2, "FAILED": 2, "CANCELLED": 2}
# Drawn with weights (repeats) so the interesting cases are common: a run still open, steps
# mostly progressing, FAILED / CANCELLED / the cancel flag now and then.
STEP_DRAW = (
    ["PENDING"] * 6 + ["SUCCEEDED"] * 4 + ["SKIPPED", "READY", "RUNNING"] * 2 + ["FAILED", "CANCELLED"]
)
RUN_DRAW = ["PENDING", "RUNNING"] * 4 + ["SUCCEEDED", "FAILED", "CANCELLED"]
FLAG_DRAW = [None] * 4 + [False, True]
IDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
UNKNOWN_IDS = ["x", "y", "z"]


# --- the reference statement -------------------------------------------------------------------


def one_of(value: Any, allowed: Any) -> bool:
    return type(value) is str and value in allowed


def is_done(status: str) -> bool:
    return status in ("SUCCEEDED", "SKIPPED")


def reference_malformed(doc: dict[str, Any]) -> list[str]:
    bad = []
    if not one_of(doc.get("status"), RUN_STATUSES):
        bad.append("status")
    if "cancelRequested" in doc and type(doc["cancelRequested"]) is not bool:
        bad.append("cancelRequested")
    if type(doc.get("steps")) is not dict:
        bad.append("steps")
        return sorted(bad)
    for step_id, step in doc["steps"].items():
        if type(step) is not dict:
            bad.append(f"steps.{step_id}")
            continue
        if not one_of(step.get("status"), STEP_STATUSES):
            bad.append(f"steps.{step_id}.status")
        deps = step.get("dependsOn", [])
        if type(deps) is not list or any(type(d) is not str for d in deps):
            bad.append(f"steps.{step_id}.dependsOn")
    return sorted(bad)


def reference_edges(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The dependsOn of each step, [] for a step whose shape is wrong."""
    edges = {}
    for step_id, step in doc["steps"].items():
        deps = step.get("dependsOn", []) if type(step) is dict else []
        ok = type(deps) is list and all(type(d) is str for d in deps)
        edges[step_id] = deps if ok else []
    return edges


def reference_unknown(doc: dict[str, Any]) -> dict[str, list[str]]:
    edges = reference_edges(doc)
    unknown = {s: sorted(set(d for d in deps if d not in edges)) for s, deps in edges.items()}
    return {s: ids for s, ids in unknown.items() if ids}


def reference_cycle_ids(doc: dict[str, Any]) -> list[str]:
    """A step is on a cycle when following dependsOn (one edge or more) leads back to it."""
    edges = reference_edges(doc)
    on_cycle = []
    for start in edges:
        seen: set[str] = set()
        frontier = [d for d in edges[start] if d in edges]
        while frontier:
            node = frontier.pop()
            if node not in seen:
                seen.add(node)
                frontier.extend(d for d in edges[node] if d in edges)
        if start in seen:
            on_cycle.append(start)
    return sorted(on_cycle)


def reference_plan(doc: dict[str, Any]) -> tuple[list[str], str | None, str | None]:
    """(steps to make READY, new run status or None, run error code or None), rule by rule."""
    status = doc.get("status")
    if one_of(status, TERMINAL):  # 1. a terminal run is final
        return [], None, None
    if doc.get("cancelRequested") is True:  # 2. cancel
        return [], "CANCELLED", None
    if reference_malformed(doc) or reference_unknown(doc) or reference_cycle_ids(doc):  # 3. invalid
        return [], "FAILED", "FLOW_RUN_INVALID"
    steps = doc["steps"]
    if any(step["status"] == "FAILED" for step in steps.values()):  # 4. a failed step fails the run
        return [], "FAILED", None
    ready = sorted(  # 5. advance
        s
        for s, step in steps.items()
        if step["status"] == "PENDING" and all(is_done(steps[d]["status"]) for d in step.get("dependsOn", []))
    )
    after = [("READY" if s in ready else step["status"]) for s, step in steps.items()]
    if all(is_done(x) for x in after):
        new = "SUCCEEDED"
    elif any(x in ("READY", "RUNNING") for x in after):
        new = "RUNNING"
    else:
        new = "CANCELLED"
    return ready, (new if new != status else None), None


# --- documents ---------------------------------------------------------------------------------


@st.composite
def flow_runs(draw: st.DrawFn, *, acyclic: bool, unknown: bool = False) -> dict[str, Any]:
    ids = draw(st.permutations(IDS))[: draw(st.integers(0, len(IDS)))]
    steps: dict[str, Any] = {}
    for i, step_id in enumerate(ids):
        targets = ids[:i] if acyclic else ids
        pool = list(targets) + (UNKNOWN_IDS if unknown else [])
        deps = draw(st.lists(st.sampled_from(pool), max_size=3)) if pool else []
        step: dict[str, Any] = {"stepType": "X", "status": draw(st.sampled_from(STEP_DRAW))}
        if deps or draw(st.booleans()):
            step["dependsOn"] = deps
        if draw(st.booleans()):
            step["outputs"] = {"uri": f"gs://b/{step_id}", "n": [i]}
        steps[step_id] = step
    order = draw(st.permutations(list(steps)))  # insertion order must not matter
    doc: dict[str, Any] = {
        "runId": "r",
        "status": draw(st.sampled_from(RUN_DRAW)),
        "steps": {s: steps[s] for s in order},
    }
    flag = draw(st.sampled_from(FLAG_DRAW))
    if flag is not None:
        doc["cancelRequested"] = flag
    return doc


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["", "DONE", "pending", "a", "PENDING"]),
    st.lists(st.one_of(st.integers(0, 2), st.sampled_from(IDS)), max_size=2),
    st.dictionaries(st.sampled_from(["status", "dependsOn"]), st.sampled_from(["PENDING", "a"]), max_size=2),
)


@st.composite
def corrupted_flow_runs(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(flow_runs(acyclic=draw(st.booleans()), unknown=draw(st.booleans())))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(
            st.sampled_from(["status", "cancelRequested", "steps", "step", "step.status", "step.dependsOn"])
        )
        if where in ("status", "cancelRequested", "steps"):
            if draw(st.booleans()):
                doc[where] = draw(JUNK)
            else:
                doc.pop(where, None)
        elif isinstance(doc.get("steps"), dict) and doc["steps"]:
            step_id = draw(st.sampled_from(sorted(doc["steps"])))
            if where == "step":
                doc["steps"][step_id] = draw(JUNK)
            elif isinstance(doc["steps"][step_id], dict):
                doc["steps"][step_id][where.split(".")[1]] = draw(JUNK)
    return doc


ANY_DOC = st.one_of(flow_runs(acyclic=True), flow_runs(acyclic=False, unknown=True), corrupted_flow_runs())


# --- properties --------------------------------------------------------------------------------


@BOUNDED
@given(flow_runs(acyclic=True))
def test_valid_dags_follow_the_reference(doc: dict[str, Any]) -> None:
    ready, status, error_code = reference_plan(doc)
    plan = plan_advance(doc)
    assert list(plan.ready_step_ids) == ready
    assert plan.run_status == status
    assert (plan.run_error or {}).get("code") == error_code
    assert plan.changed == bool(ready or status)


@BOUNDED
@given(ANY_DOC)
def test_every_document_follows_the_reference(doc: dict[str, Any]) -> None:
    ready, status, error_code = reference_plan(doc)
    plan = plan_advance(doc)
    assert (list(plan.ready_step_ids), plan.run_status) == (ready, status)
    assert (plan.run_error or {}).get("code") == error_code


@BOUNDED
@given(st.one_of(flow_runs(acyclic=False, unknown=True), corrupted_flow_runs()))
def test_invalid_documents_are_reported_with_exactly_the_offending_fields_and_ids(
    doc: dict[str, Any],
) -> None:
    plan = plan_advance(doc)
    if one_of(doc.get("status"), TERMINAL) or doc.get("cancelRequested") is True:
        assert plan.run_error is None
        return
    expected = {
        "malformedFields": reference_malformed(doc),
        "unknownDependsOn": reference_unknown(doc) if type(doc.get("steps")) is dict else {},
        "cycleStepIds": reference_cycle_ids(doc) if type(doc.get("steps")) is dict else [],
    }
    expected = {k: v for k, v in expected.items() if v}
    if not expected:
        assert plan.run_error is None
        return
    assert plan.run_status == "FAILED" and plan.ready_step_ids == ()
    assert plan.run_error is not None and plan.run_error["code"] == "FLOW_RUN_INVALID"
    assert plan.run_error["details"] == expected
    named = expected.get("malformedFields", []) + expected.get("cycleStepIds", [])
    named += [i for ids in expected.get("unknownDependsOn", {}).values() for i in ids]
    assert all(name in plan.run_error["message"] for name in named)


@BOUNDED
@given(ANY_DOC)
def test_own_write_comes_back_as_a_no_op(doc: dict[str, Any]) -> None:
    after = apply_plan(doc, plan_advance(doc))
    again = plan_advance(after)
    assert not again.changed, again
    assert apply_plan(after, again) == after


@BOUNDED
@given(ANY_DOC, ANY_DOC)
def test_applying_any_plan_only_moves_forward(doc: dict[str, Any], other: dict[str, Any]) -> None:
    """Whatever snapshot a plan came from (this one, an older or a newer one), applying it to
    `doc` never regresses `doc`, touches nothing but statuses and the run error, and leaves `doc`
    itself untouched."""
    before = copy.deepcopy(doc)
    for plan in (plan_advance(doc), plan_advance(other)):
        after = apply_plan(doc, plan)
        assert doc == before
        assert {k: v for k, v in after.items() if k not in ("steps", "status", "error")} == {
            k: v for k, v in before.items() if k not in ("steps", "status", "error")
        }
        if one_of(before.get("status"), TERMINAL):
            assert after == before
            continue
        if after.get("status") != before.get("status"):
            assert RUN_ORDER[after["status"]] > (
                RUN_ORDER.get(before["status"], -1) if one_of(before.get("status"), RUN_ORDER) else -1
            )
        if after.get("error") != before.get("error"):
            assert after["status"] == "FAILED"
        if type(before.get("steps")) is dict:
            for step_id, step in before["steps"].items():
                new = after["steps"][step_id]
                if new != step:
                    assert step["status"] == "PENDING" and new == {**step, "status": "READY"}


@BOUNDED
@given(flow_runs(acyclic=True))
def test_blocked_steps_are_never_advanced(doc: dict[str, Any]) -> None:
    steps = doc["steps"]
    ready = set(plan_advance(doc).ready_step_ids)
    for step_id in ready:
        assert steps[step_id]["status"] == "PENDING"
        assert all(
            steps[d]["status"] in ("SUCCEEDED", "SKIPPED") for d in steps[step_id].get("dependsOn", [])
        )


@BOUNDED
@given(flow_runs(acyclic=True))
def test_cancelled_without_the_flag_only_when_a_step_was_cancelled(doc: dict[str, Any]) -> None:
    plan = plan_advance(doc)
    if plan.run_status == "CANCELLED" and doc.get("cancelRequested") is not True:
        assert any(step["status"] == "CANCELLED" for step in doc["steps"].values())


@BOUNDED
@given(ANY_DOC, st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_key_order(doc: dict[str, Any], rnd: Any) -> None:
    shuffled = dict(rnd.sample(list(doc.items()), len(doc)))
    if type(doc.get("steps")) is dict:
        shuffled["steps"] = dict(rnd.sample(list(doc["steps"].items()), len(doc["steps"])))
    assert plan_advance(shuffled) == plan_advance(doc)
