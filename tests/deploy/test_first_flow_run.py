"""deploy/first_flow_run.json, the run deploy/README submits to a fresh deployment, ends by itself:
it is a valid flow_run, advance_flow's rules start it on creation, every step is one this
deployment runs (CHART_EXPORT), its templates are the ones `templates sync` ships, and once the
step succeeds the run settles SUCCEEDED."""

from __future__ import annotations

import json
from typing import Any

from harness.builders import REPO, load_templates
from worker_chart_export.bundled.contracts import FLOW_RUN, validator
from worker_chart_export.core.flow.flow_rules import apply_plan, plan_advance

FIRST_RUN = REPO / "deploy" / "first_flow_run.json"


def first_run() -> dict[str, Any]:
    return dict(json.loads(FIRST_RUN.read_text()))


def test_it_is_a_valid_flow_run_of_chart_export_steps_with_shipped_templates() -> None:
    run = first_run()
    assert [e.message for e in validator(FLOW_RUN).iter_errors(run)] == []
    assert {step["stepType"] for step in run["steps"].values()} == {"CHART_EXPORT"}
    requested = {r["chartTemplateId"] for s in run["steps"].values() for r in s["inputs"]["requests"]}
    assert requested <= set(load_templates())


def test_it_starts_on_creation_and_settles_when_its_charts_are_done() -> None:
    created = first_run()
    started = apply_plan(created, plan_advance(created))
    assert started["status"] == "RUNNING"
    assert {s["status"] for s in started["steps"].values()} == {"READY"}
    done = {**started, "steps": {k: {**s, "status": "SUCCEEDED"} for k, s in started["steps"].items()}}
    assert plan_advance(done).run_status == "SUCCEEDED"
