"""core/documents.py's TypedDicts against contracts/flow_run.schema.json: every property of
the schema is a key of its TypedDict and every key a property, required exactly where the
schema requires it."""

from __future__ import annotations

import json
from typing import Any, get_type_hints

import pytest

from worker_chart_export import bundled
from worker_chart_export.core import documents

SCHEMA = json.loads((bundled.contracts_dir() / "flow_run.schema.json").read_text(encoding="utf-8"))
DEFS = SCHEMA["$defs"]
CHART_EXPORT = DEFS["chartExportStep"]["properties"]


def _step() -> dict[str, Any]:
    """A step: every step's properties, with what a CHART_EXPORT step adds."""
    return {**DEFS["step"], "properties": {**DEFS["step"]["properties"], **CHART_EXPORT}}


# each TypedDict and the part of the schema it stands for
PAIRS = [
    (documents.FlowRunDocument, SCHEMA),
    (documents.RunScope, SCHEMA["properties"]["scope"]),
    (documents.StepDocument, _step()),
    (documents.ChartExportInputs, CHART_EXPORT["inputs"]),
    (documents.ChartRequestInput, DEFS["chartRequest"]),
    (documents.StepOutputs, CHART_EXPORT["outputs"]),
    (documents.ErrorDocument, DEFS["error"]),
]


def keys_of(schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    return set(schema.get("properties", {})), set(schema.get("required", []))


@pytest.mark.parametrize("typed, schema", PAIRS, ids=[typed.__name__ for typed, _ in PAIRS])
def test_each_typed_document_has_the_schema_s_keys_required_as_the_schema_says(
    typed: Any, schema: dict[str, Any]
) -> None:
    properties, required = keys_of(schema)
    assert set(get_type_hints(typed)) == properties
    assert set(typed.__required_keys__) == required


def test_a_key_the_schema_lacks_is_found() -> None:
    # the check can fail: a TypedDict with one key more, or a key required that is not
    from typing import Required, TypedDict

    fields = {"code": Required[str], "message": str, "details": dict[str, Any], "extra": int}
    Wider = TypedDict("Wider", fields, total=False)  # type: ignore[misc]  # evaluated: sees Required
    properties, required = keys_of(DEFS["error"])
    assert set(get_type_hints(Wider)) != properties and set(Wider.__required_keys__) != required


def test_a_step_update_holds_only_step_keys_of_the_step_s_types() -> None:
    # core.step.step_rules merges a StepUpdate into a StepDocument as a plain dict: each of its
    # keys must be a key of the step, of the same type, or the merge writes what the schema lacks
    step = get_type_hints(documents.StepDocument)
    update = get_type_hints(documents.StepUpdate)
    assert update and {key: step.get(key) for key in update} == update
    assert not documents.StepUpdate.__required_keys__


def test_as_flow_run_checks_nothing_and_keeps_every_key() -> None:
    # the rules read a typed document defensively; the boundary neither drops nor adds a key
    document: dict[str, Any] = {"steps": "not a map", "extra": 1}
    assert documents.as_flow_run(document) is document
    assert documents.as_flow_run(None) is None
