"""The package's shape, read from its source (ast, nothing imported): one name for one thing."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import worker_chart_export

PACKAGE = Path(worker_chart_export.__file__).parent


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def classes_by_name() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for name in _classes(path):
            found[name].append(str(path.relative_to(PACKAGE)))
    return found


def test_no_two_classes_of_the_package_share_a_name() -> None:
    shared = {name: where for name, where in classes_by_name().items() if len(where) > 1}
    assert not shared, f"one name for one thing; these classes share a name: {shared}"


def test_the_walk_sees_every_class(tmp_path: Path) -> None:
    # the check can fail: two modules declaring one name are found
    (tmp_path / "a.py").write_text("class Rendered:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Rendered: ...\n")
    assert _classes(tmp_path / "a.py") == _classes(tmp_path / "b.py") == ["Rendered"]
    assert "StepReport" in classes_by_name()


def _called_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                called.add(func.id)
            elif isinstance(func, ast.Attribute):
                called.add(func.attr)
    return called


def adapter_constructions() -> dict[str, set[str]]:
    """Each module outside bootstrap/ and adapters/ that calls a class of adapters/."""
    adapter_classes = {name for path in (PACKAGE / "adapters").rglob("*.py") for name in _classes(path)}
    found: dict[str, set[str]] = {}
    for path in _modules():
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ("adapters", "bootstrap"):
            continue
        if built := _called_names(path) & adapter_classes:
            found[str(relative)] = built
    return found


def test_only_bootstrap_and_the_adapters_construct_an_adapter() -> None:
    assert adapter_constructions() == {}, "build it in bootstrap/ (the one assembly) and hand it over"


def test_a_construction_is_seen(tmp_path: Path) -> None:
    # the check can fail: a call of the class, bare or through its module, is found
    (tmp_path / "m.py").write_text("s = FileUsageStore(p)\nt = local.LocalFlowRunStore(a, b)\n")
    assert _called_names(tmp_path / "m.py") >= {"FileUsageStore", "LocalFlowRunStore"}


def doubles_outside_testing() -> dict[str, list[str]]:
    """InMemory* and Fake* classes of the package that are not in worker_chart_export.testing."""
    found: dict[str, list[str]] = {}
    for path in _modules():
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "testing":
            continue
        if doubles := [n for n in _classes(path) if n.startswith(("InMemory", "Fake"))]:
            found[str(relative)] = doubles
    return found


def test_the_in_memory_doubles_live_in_testing() -> None:
    assert doubles_outside_testing() == {}, "one home for doubles: worker_chart_export/testing/"
    assert {"FakeClock", "InMemoryFlowRuns", "InMemoryUsageStore"} <= set(classes_by_name())
