"""What scripts/mutation_score.py judges: every mutant of the modules pyproject mutates, but of
the Firestore adapters only their pure functions (PURE_ONLY); and those still exist."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
from mutation_score import PURE_ONLY, judged  # noqa: E402

FIRESTORE = "worker_chart_export.adapters.firestore"


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        (f"{FIRESTORE}.run_documents.x_claim_update__mutmut_3", True),
        (f"{FIRESTORE}.run_documents.xǁWrittenVersionsǁremember__mutmut_4", True),
        (f"{FIRESTORE}.run_documents.xǁRunDocumentsǁcommit_on__mutmut_1", False),  # I/O
        (f"{FIRESTORE}.leases.x_reap_update__mutmut_1", True),
        (f"{FIRESTORE}.leases.xǁFirestoreLeaseReaperǁreap__mutmut_1", False),
        (f"{FIRESTORE}.step_claim.xǁClaimRequestǁplan__mutmut_2", True),
        (f"{FIRESTORE}.step_claim.x__still_ready__mutmut_1", True),
        (f"{FIRESTORE}.step_claim.xǁStepClaimǁclaim__mutmut_2", False),
        ("worker_chart_export.core.chart_img.usage.x_window_start__mutmut_2", True),  # other modules: all
        ("worker_chart_export.service.execute.x__noop__mutmut_1", True),
    ],
)
def test_of_the_firestore_adapters_only_the_pure_functions_are_judged(name: str, counts: bool) -> None:
    assert judged(name) is counts


def mangled_functions(module: str) -> set[str]:
    """mutmut's keys of a module's functions and methods: x_name, xǁClassǁname."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    keys = {f"x_{node.name}" for node in tree.body if isinstance(node, ast.FunctionDef)}
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        keys |= {f"xǁ{cls.name}ǁ{f.name}" for f in cls.body if isinstance(f, ast.FunctionDef)}
    return keys


@pytest.mark.parametrize("module", sorted(PURE_ONLY))
def test_every_pure_function_named_is_still_there_and_mutated(module: str) -> None:
    """A rename would silently leave a function out of the score: each pattern names one."""
    functions = mangled_functions(module)
    for pattern in PURE_ONLY[module]:
        assert any(fnmatch(key, pattern) for key in functions), f"{module}: nothing matches {pattern}"
    mutated = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    path = "src/" + module.replace(".", "/") + ".py"
    assert any(fnmatch(path, glob) for glob in mutated), f"{path} is not in only_mutate"
