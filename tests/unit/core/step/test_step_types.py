"""The handled step types are decided in core/step/step_types.py alone: `handles` says which
steps are ours, and no other module of src/ compares a step type with CHART_EXPORT (nor keeps
the name to compare later); core/types.py only defines it."""

from __future__ import annotations

import ast

import pytest

from harness.builders import REPO
from worker_chart_export.core.step.step_types import (
    HANDLED_STEP_TYPES,
    handles,
    mentions_a_handled_type,
    names_a_handled_type,
)

PACKAGE = REPO / "src" / "worker_chart_export"
SEAM = PACKAGE / "core" / "step" / "step_types.py"
DEFINITION = PACKAGE / "core" / "types.py"  # CHART_EXPORT = "CHART_EXPORT"
WATCHED_NAMES = {"CHART_EXPORT", "HANDLED_STEP_TYPES"}
WATCHED_VALUES = {"CHART_EXPORT", b"CHART_EXPORT"}


class _Uses(ast.NodeVisitor):
    """The lines where the type's name, its string or the handled set is used as a value."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.lines = names, set[int]()

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        """An f-string names the type in a message: that decides nothing."""

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names:
            self.lines.add(node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in self.names:
            self.lines.add(node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value in WATCHED_VALUES:
            self.lines.add(node.lineno)


def step_type_decisions(source: str) -> list[int]:
    """Lines that could decide which steps are ours: the CHART_EXPORT type (its name under any
    alias, its string, its bytes, the handled set) compared with something, or kept, encoded or
    passed on to be compared later. Naming it in an f-string (a message) is not one."""
    tree = ast.parse(source)
    names = set(WATCHED_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name in WATCHED_NAMES and a.asname}
    finder = _Uses(names)
    finder.visit(tree)
    return sorted(finder.lines)


@pytest.mark.parametrize(
    "source",
    [
        'step.get("stepType") == CHART_EXPORT',
        'CHART_EXPORT != step.get("stepType")',
        'if kind == "CHART_EXPORT": pass',
        'kind in {CHART_EXPORT, "OHLCV_EXPORT"}',
        "kind in types.HANDLED_STEP_TYPES",
        "b'CHART_EXPORT' in data",
        "WORD = CHART_EXPORT.encode()",  # compared later, under another name
        'HANDLED = frozenset({"CHART_EXPORT"})',
        "from worker_chart_export.core.types import CHART_EXPORT as KIND\nok = kind == KIND",
        'match kind:\n    case "CHART_EXPORT":\n        pass',
    ],
)
def test_the_finder_sees_each_way_of_deciding_on_the_type(source: str) -> None:
    assert step_type_decisions(source) != []


@pytest.mark.parametrize(
    "source",
    [
        'print(f"CHART_EXPORT {outcome}")',  # messages name it: no decision
        'raise ValueError(f"expected {CHART_EXPORT!r}")',
        '"""Runs one CHART_EXPORT step."""',
        "from worker_chart_export.core.types import CHART_EXPORT",
        "ok = handles(step)",
        'ok = step.get("stepType") == other',
    ],
)
def test_the_finder_leaves_what_decides_nothing(source: str) -> None:
    assert step_type_decisions(source) == []


def test_no_module_but_the_seam_decides_on_the_step_type() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert SEAM in modules and DEFINITION in modules and len(modules) > 50
    found = {
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in modules
        if path not in (SEAM, DEFINITION)
        for line in step_type_decisions(path.read_text(encoding="utf-8"))
    }
    assert found == set(), "compare step types in core/step/step_types.py (`handles`), not here"
    assert step_type_decisions(SEAM.read_text(encoding="utf-8")) != []  # the one place


def test_handled_types_are_chart_export_alone() -> None:
    assert frozenset({"CHART_EXPORT"}) == HANDLED_STEP_TYPES


@pytest.mark.parametrize(
    ("step", "handled"),
    [
        ({"stepType": "CHART_EXPORT", "status": "READY"}, True),
        ({"stepType": "CHART_EXPORT"}, True),  # whatever its status
        ({"stepType": "LLM_REPORT", "status": "READY"}, False),
        ({"stepType": "chart_export"}, False),  # exact, as the contract spells it
        ({"stepType": "CHART_EXPORT "}, False),
        ({"status": "READY"}, False),
        ({"stepType": None}, False),
        ({"stepType": ["CHART_EXPORT"]}, False),  # unhashable: not a type, and no TypeError
        ({"stepType": {"CHART_EXPORT": 1}}, False),
    ],
)
def test_handles_a_step_of_a_handled_type_only(step: dict[str, object], handled: bool) -> None:
    assert handles(step) is handled


def test_the_byte_filters_find_the_type_name_in_serialized_bytes() -> None:
    step = b"\n\x08stepType\x12\x0e\x8a\x01\x0cCHART_EXPORT"
    assert names_a_handled_type(step) and mentions_a_handled_type(step) is not None
    other = b"\n\x08stepType\x12\x0c\x8a\x01\x0aLLM_REPORT CHART_EXPOR"
    assert not names_a_handled_type(other) and mentions_a_handled_type(other) is None
