"""Every command the documentation shows works as written right after `bash scripts/bootstrap.sh`:
README.md, deploy/*.md and docs/*.md, fenced and inline, checked by harness.doc_commands (the
program exists after the set-up, the CLI's arguments parse with its own parser, a file of keys
is ignored by git). Commands of the local stack are also run, as written, by
tests/e2e/test_stack_command.py; the ones that need a cloud project are only named."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness.builders import REPO
from harness.doc_commands import DocCommand, commands_in, doc_files, is_ignored, problems_of

ALL = [command for path in doc_files() for command in commands_in(path)]


def test_the_docs_show_commands_in_every_file_that_has_them() -> None:
    sources = {command.source.split(":")[0] for command in ALL}
    assert {"README.md", "deploy/README.md", "deploy/RUNBOOK.md", "docs/stack.md"} <= sources
    assert len(ALL) >= 25


@pytest.mark.parametrize("command", ALL, ids=[f"{c.source} {c.text[:50]}" for c in ALL])
def test_each_command_works_as_written_after_the_set_up(command: DocCommand) -> None:
    assert list(problems_of(command)) == [], f"{command.source}: {command.text}"


def test_every_key_file_name_the_docs_suggest_is_ignored_by_git() -> None:
    """Any name an accounts file is given in the docs, wherever they put it: should one land in
    the checkout, git ignores it (a tracked file of the repository is not a key file)."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in doc_files())
    mentioned = {Path(name).name for name in re.findall(r"[\w./~-]*accounts[\w.-]*\.json\b", text)}
    tracked = {Path(name).name for name in git_files()}
    names = mentioned - tracked - {"chart_img_accounts_usage.json"}  # run-local's usage: no key
    assert {"chart-img.accounts.json", "chart-img.accounts.local.json", "accounts.json"} <= names
    assert [name for name in sorted(names) if not is_ignored(name)] == []


def git_files() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def check(tmp_path: Path, markdown: str) -> list[str]:
    """What the checker says of `markdown` as a doc of a checkout with this repository's venv."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "demo.sh").write_text("#!/usr/bin/env bash\n")
    (tmp_path / ".gitignore").write_text("chart-img.accounts*.json\n")
    (tmp_path / "README.md").write_text(markdown)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    found = []
    for command in commands_in(tmp_path / "README.md", tmp_path):
        found += [f"{command.text}: {problem}" for problem in problems_of(command, tmp_path)]
    return found


def test_the_check_fails_what_does_not_work_as_written(tmp_path: Path) -> None:
    problems = check(
        tmp_path,
        "Run `worker-chart-export view out/demo` (`worker-chart-export stack up` is a name).\n\n"
        "```bash\n"
        "bash scripts/demo.sh\n"
        "bash scripts/nope.sh\n"
        ".venv/bin/worker-chart-export serve --port 99999\n"
        ".venv/bin/worker-chart-export run-local --flow-run-path f.json \\\n"
        "    [--step-id=charts_1h]   # a synopsis is not a command\n"
        ".venv/bin/worker-chart-export accounts --accounts-config-path keys.json\n"
        "pip install hatch && .venv/bin/hatch --version\n"
        "no-such-program --flag\n"
        "```\n\n"
        "```\n$ worker-chart-export accounts\noutput, not a command\n```\n",
    )
    expected = [
        "worker-chart-export view out/demo: `worker-chart-export` is not on PATH",
        "bash scripts/nope.sh: bash: no script 'scripts/nope.sh' here",
        "serve --port 99999: worker-chart-export serve: error: argument --port: 99999 is out of range",
        "[--step-id=charts_1h]   # a synopsis is not a command: worker-chart-export run-local: error: "
        "unrecognized arguments: [--step-id=charts_1h]",
        "keys.json: keys.json holds API keys but .gitignore does not cover it",
        "pip install hatch && .venv/bin/hatch --version: `pip` is not the project's after the set-up",
        "pip install hatch && .venv/bin/hatch --version: .venv/bin/hatch does not exist after the set-up",
        "no-such-program --flag: `no-such-program` is not installed here",
        "worker-chart-export accounts: `worker-chart-export` is not on PATH",
    ]
    assert len(problems) == len(expected), "\n".join(problems)
    for problem, words in zip(problems, expected, strict=True):
        assert words.split(": ", 1)[1].split(" (see")[0] in problem, (problem, words)


def test_an_install_earlier_in_the_block_provides_its_program(tmp_path: Path) -> None:
    assert check(tmp_path, "```bash\n.venv/bin/pip install hatch\n.venv/bin/hatch build\n```\n") == []
