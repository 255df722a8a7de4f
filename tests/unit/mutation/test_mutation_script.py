"""scripts/mutation.sh's bookkeeping around mutmut: a fresh run starts from an empty mutants/
and records the commit its verdicts hold for; --resume keeps the verdicts only on that very
commit, unmodified. mutmut and the score script are stand-ins here that record their
arguments (a real run takes hours); the git is real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[3]


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=GIT_ENV, timeout=60
    )
    return result.stdout.strip()


GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository with the script, src/ and tests/, and a .venv whose mutmut and python
    append their arguments to calls.log."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "mutation.sh", repo / "scripts" / "mutation.sh")
    for folder in ("src", "tests"):
        (repo / folder).mkdir()
        (repo / folder / "module.py").write_text("x = 1\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("mutmut", "python"):
        (bin_dir / tool).write_text(
            f'#!/bin/sh\necho "{tool} $*" >>"$(dirname "$0")/../../calls.log"\n'
            f'echo "{tool} ${{HYPOTHESIS_PROFILE:-(none)}}" >>"$(dirname "$0")/../../profiles.log"\n'
        )
        (bin_dir / tool).chmod(0o755)
    (repo / ".gitignore").write_text(".venv/\nmutants/\ncalls.log\nprofiles.log\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    return repo


def mutation(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/mutation.sh", *args], cwd=repo, capture_output=True, text=True, timeout=60
    )


def calls(repo: Path) -> list[str]:
    return (repo / "calls.log").read_text().splitlines()


def test_a_fresh_run_empties_mutants_and_records_its_commit(checkout: Path) -> None:
    (checkout / "mutants").mkdir()
    (checkout / "mutants" / "old.meta").write_text("a verdict of another run")
    run = mutation(checkout, "src/worker_chart_export/core/naming.py")
    assert run.returncode == 0, run.stderr
    assert not (checkout / "mutants" / "old.meta").exists()
    assert (checkout / "mutants" / "commit").read_text().strip() == git(checkout, "rev-parse", "HEAD")
    assert calls(checkout) == [
        f"mutmut run --max-children {len(os.sched_getaffinity(0))} worker_chart_export.core.naming.*",
        "python scripts/mutation_score.py worker_chart_export.core.naming.*",
    ]
    # mutmut's tests draw hypothesis's examples by tests/conftest.py's "mutation" profile
    assert (checkout / "profiles.log").read_text().splitlines()[0] == "mutmut mutation"


def test_resume_keeps_the_verdicts_on_the_commit_the_run_began_on(checkout: Path) -> None:
    assert mutation(checkout).returncode == 0
    (checkout / "mutants" / "kept.meta").write_text("a verdict of this run")
    run = mutation(checkout, "--resume")
    assert run.returncode == 0, run.stderr
    assert (checkout / "mutants" / "kept.meta").exists()
    assert calls(checkout)[-2].startswith("mutmut run --max-children")


def test_resume_refuses_another_commit_or_a_modified_checkout(checkout: Path) -> None:
    assert mutation(checkout).returncode == 0
    (checkout / "tests" / "module.py").write_text("x = 2\n")  # a test changed since
    modified = mutation(checkout, "--resume")
    assert modified.returncode == 2 and "-modified" in modified.stderr
    git(checkout, "commit", "-qam", "second")
    moved = mutation(checkout, "--resume")
    assert moved.returncode == 2 and "cannot resume: mutants/ was begun on" in moved.stderr
    (checkout / "calls.log").unlink()
    assert mutation(checkout, "--resume").returncode == 2
    assert not (checkout / "calls.log").exists()  # mutmut never started
    assert (checkout / "mutants" / "commit").exists()  # and nothing was thrown away


def test_resume_without_a_run_says_so(checkout: Path) -> None:
    run = mutation(checkout, "--resume")
    assert run.returncode == 2 and "mutants/ was begun on no run" in run.stderr


def hypothesis_profile_loaded(profile: str | None) -> str:
    """Whether the tests' hypothesis settings keep no example database and draw fixed
    examples, as tests/conftest.py leaves them with HYPOTHESIS_PROFILE set so (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    if profile is not None:
        env["HYPOTHESIS_PROFILE"] = profile
    code = (
        "import sys; sys.path[:0] = ['tests']; import conftest; from hypothesis import settings; "
        "print(settings.default.database is None, settings.default.derandomize)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_a_mutation_run_keeps_no_examples_between_mutants_and_draws_the_same_ones() -> None:
    assert hypothesis_profile_loaded("mutation") == "True True"
    assert hypothesis_profile_loaded(None) == "False False"  # the test command keeps its examples
