"""The README stays one page a newcomer reads through: what the worker does, the demo, both test
lanes and the way to deploy; the rest lives in docs/ (its commands: test_docs_commands.py)."""

from __future__ import annotations

from harness.builders import REPO
from harness.doc_commands import commands_in

PAGE = 150  # lines


def test_the_readme_fits_on_a_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PAGE, f"README.md has {len(lines)} lines, {PAGE} at most: move the details to docs/"


def test_the_readme_shows_the_demo_and_both_test_lanes() -> None:
    commands = commands_in(REPO / "README.md")
    shown = {" ".join(words) for command in commands for words in command.simple_commands()}
    assert {"bash scripts/demo.sh", "bash scripts/test.sh --unit", "bash scripts/test.sh"} - shown == set()
