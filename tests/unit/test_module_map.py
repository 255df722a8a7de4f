"""The docs cannot drift from the code: the module map of docs/architecture.md is the one
scripts/module_map.py makes from the docstrings, and every module or source path the docs
(and the package's own docstrings and comments) name exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness.builders import REPO

PACKAGE = REPO / "src" / "worker_chart_export"
LAYERS = ("core", "service", "adapters", "functions", "cli", "tools", "bootstrap", "testing", "bundled")
SOURCE_PATH = re.compile(r"(?<![\w/.-])src/worker_chart_export/([\w/]+\.py)")
PACKAGE_PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(LAYERS)})/[\w/]*\w\.py)\b")
DOTTED = re.compile(rf"(?<![\w/.-])(?:worker_chart_export\.)?((?:{'|'.join(LAYERS)})(?:\.\w+)+)")


def docs() -> list[Path]:
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "deploy").glob("*.md")),
    ]


def missing_module(dotted: str) -> str | None:
    """None when `dotted` names a module, or an attribute of one; else the part that is missing."""
    here = PACKAGE
    for index, part in enumerate(dotted.split(".")):
        if (here / f"{part}.py").is_file():
            return None  # a module; what follows is one of its attributes
        if (here / part / "__init__.py").is_file():
            here = here / part
            continue
        if index and part in (here / "__init__.py").read_text(encoding="utf-8"):
            return None  # a name the package defines or imports
        return ".".join(dotted.split(".")[: index + 1])
    return None


def stale_names(text: str) -> set[str]:
    found = {m for m in SOURCE_PATH.findall(text) if not (PACKAGE / m).is_file()}
    found |= {m for m in PACKAGE_PATH.findall(text) if not (PACKAGE / m).is_file()}
    return found | {missing for d in DOTTED.findall(text) if (missing := missing_module(d))}


def test_the_module_map_is_the_docstrings() -> None:
    check = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "module_map.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def test_every_module_the_docs_and_the_docstrings_name_exists() -> None:
    sources = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    stale = {
        str(path.relative_to(REPO)): names
        for path in [*docs(), *sources]
        if (names := stale_names(path.read_text(encoding="utf-8")))
    }
    assert stale == {}


def test_a_stale_name_is_found() -> None:
    # the check can fail: names of modules that moved or never were
    text = "see core.step_rules.plan_claim, src/worker_chart_export/core/outcome.py and adapters/limiter.py"
    assert stale_names(text) == {"core.step_rules", "core/outcome.py", "adapters/limiter.py"}
    fine = "core.step.step_rules.plan_claim, core/chart_img/usage.py, service/execute.execute_step"
    assert stale_names(fine) == set()
