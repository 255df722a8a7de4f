"""The shell commands the documentation shows, as a newcomer copies them, and whether each
works as written right after `bash scripts/bootstrap.sh` (README "Two commands").

Where commands are (markdown-it parses the files, so a fence is what a renderer shows):
- every line of a ```bash / ```sh / ```shell fence, a `\\`-continued line joined to the next,
  `# comments` dropped, `&&`, `||`, `;` and `|` separating commands;
- `$ `-prompted lines of any fence (a transcript: the rest is output);
- an inline code span whose first word (after `NAME=value` assignments) is a program: the
  CLI, a path (`.venv/bin/...`, `./deploy/...`), `bash`, or a program on PATH named below.
  The CLI alone with its subcommand words (`worker-chart-export stack up`) is a name in a
  sentence, a line it prints (`worker-chart-export view: error: ...`) is a message, and
  `./name` is a file unless it is a script (`.sh`): none of them is a command.

What "works as written" means, per program (`problem_of`):
- `worker-chart-export` bare: never (the set-up does not put it on PATH);
- a path: the file exists after the set-up (or an earlier `.venv/bin/pip install NAME` of
  the same block installs it); the CLI's arguments must parse with the CLI's own argparse,
  placeholders (`<runId>`) standing for a value; `.venv/bin/python FILE`: FILE exists;
- a bare program that the venv also has (`pip`, `python`, `pytest`...): never, it would not
  be the project's; `bash FILE`: FILE exists; `export`: assignments only;
- a program that needs a cloud project (NEEDS_A_CLOUD): not run, only named;
- anything else: on PATH.
An argument given to `--accounts-config-path` or `--check-file`, or as `ACCOUNTS_FILE=`, is a
file of API keys: git must ignore it (`.gitignore`).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from harness.builders import REPO

DOC_FILES = ("README.md", "deploy/*.md", "docs/*.md")
# the user's contract, quoted whole: its examples are the contract's words, not instructions
QUOTED = {"docs/contract.md"}
SHELL_FENCES = frozenset({"bash", "sh", "shell", "console"})
CLI = "worker-chart-export"
VENV_CLI = f".venv/bin/{CLI}"
# programs whose commands change a Google Cloud project or need its credentials: the docs
# name them; tests/deploy checks deploy.sh's own calls with the installed gcloud's parser
NEEDS_A_CLOUD = {
    "gcloud": "Google Cloud CLI against a real project",
    "./deploy/deploy.sh": "creates cloud resources (tests/deploy runs it with --dry-run and a sandbox)",
}
KEY_FILE_FLAGS = ("--accounts-config-path", "--check-file")
KEY_FILE_VARIABLE = "ACCOUNTS_FILE"
# a placeholder stands for a value of its kind; any other <name> stands for "name"
PLACEHOLDER_VALUES = {"port": "8080", "function": "on_flow_run_updated", "N": "2"}
_PLACEHOLDER = re.compile(r"<([A-Za-z][\w-]*)>")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
_CLI_SAYS = re.compile(rf"^(?:\.venv/bin/)?{CLI}(?: [\w<>-]+)*: ")


@dataclass(frozen=True)
class DocCommand:
    source: str  # "README.md:49"
    text: str  # as written, continuations joined
    block: tuple[str, ...] = ()  # the commands before it in the same fence, for installs
    inline: bool = False  # a code span in a sentence: one command (`create|update` is prose)

    def simple_commands(self) -> list[list[str]]:
        """The command split at shell operators, each as words (quotes removed)."""
        lexer = shlex.shlex(self.text, posix=True, punctuation_chars="" if self.inline else ";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        commands: list[list[str]] = [[]]
        for word in lexer:
            if word in _OPERATORS:
                commands.append([])
            else:
                commands[-1].append(word)
        return [words for words in commands if words]


def doc_files(root: Path = REPO) -> list[Path]:
    found = {path for pattern in DOC_FILES for path in root.glob(pattern)}
    return sorted(path for path in found if str(path.relative_to(root)) not in QUOTED)


def commands_in(path: Path, root: Path = REPO) -> list[DocCommand]:
    name = str(path.relative_to(root))
    found: list[DocCommand] = []
    for token in MarkdownIt().parse(path.read_text(encoding="utf-8")):
        first_line = (token.map or [0])[0] + 1
        if token.type == "fence":
            found += _fence_commands(token.content, token.info.strip().lower(), name, first_line + 1)
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "code_inline" and _is_command(child.content):
                    found.append(DocCommand(f"{name}:{first_line}", child.content, inline=True))
    return found


def _fence_commands(content: str, info: str, name: str, first_line: int) -> list[DocCommand]:
    found: list[DocCommand] = []
    pending, start = "", 0
    for number, line in enumerate(content.splitlines(), first_line):
        if not pending:
            if line.startswith("$ "):
                line = line[2:]
            elif info not in SHELL_FENCES:
                continue
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text and not text.startswith("#"):
            found.append(DocCommand(f"{name}:{start}", text, tuple(c.text for c in found)))
    return found


def _is_command(span: str) -> bool:
    if _CLI_SAYS.match(span):
        return False  # a line the CLI prints (`worker-chart-export view: error: ...`)
    try:
        words = _without_assignments(shlex.split(span))
    except ValueError:
        return False
    if not words:
        return False
    program = words[0]
    if program in (CLI, VENV_CLI):
        return not _only_subcommand_words(words[1:])
    if program.startswith("./"):
        return program.endswith(".sh")  # `./chart-img.accounts.json` is a file's name
    return program.startswith(".venv/bin/") or program in {"bash", *NEEDS_A_CLOUD}


def _without_assignments(words: Sequence[str]) -> list[str]:
    words = list(words)
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words


def _only_subcommand_words(words: Sequence[str]) -> bool:
    """`stack up`, `templates sync`, `view`: the name of a subcommand, not a command line."""
    from worker_chart_export.cli.main import build_parser

    parser = build_parser()
    for word in words:
        choices = _subcommands(parser)
        if word not in choices:
            return False
        parser = choices[word]
    return True


def _subcommands(parser: object) -> dict[str, object]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def problems_of(command: DocCommand, root: Path = REPO) -> Iterator[str]:
    """What keeps `command` from working as written after the set-up (nothing: it works)."""
    try:
        commands = command.simple_commands()
    except ValueError as exc:
        yield f"not a shell command ({exc})"
        return
    installed = _installed_by(command.block)
    for words in commands:
        yield from _key_files_not_ignored(words, root)
        problem = _program_problem(_without_assignments(words), installed, root)
        if problem is not None:
            yield problem


def _installed_by(block: Sequence[str]) -> set[str]:
    """`.venv/bin/NAME` files an earlier `.venv/bin/pip install NAME` of the block makes."""
    names: set[str] = set()
    for text in block:
        words = text.split()
        if words[:2] == [".venv/bin/pip", "install"]:
            names.update(f".venv/bin/{word}" for word in words[2:] if not word.startswith("-"))
    return names


def _program_problem(words: list[str], installed: set[str], root: Path) -> str | None:
    if not words:
        return None  # assignments only
    program, arguments = words[0], words[1:]
    if program == "export":
        bad = [word for word in arguments if not _ASSIGNMENT.match(word)]
        return f"export of {bad}: not NAME=value" if bad else None
    if program == CLI:
        return f"`{CLI}` is not on PATH after `bash scripts/bootstrap.sh`: write {VENV_CLI}"
    if program in NEEDS_A_CLOUD:
        return _needs_a_cloud(program, root)
    if "/" in program:
        return _path_problem(program, arguments, installed, root)
    if (root / ".venv" / "bin" / program).exists():
        return f"`{program}` is not the project's after the set-up: write .venv/bin/{program}"
    if program == "bash":
        script = next((word for word in arguments if not word.startswith("-")), None)
        return None if script and (root / script).is_file() else f"bash: no script {script!r} here"
    return None if shutil.which(program) else f"`{program}` is not installed here"


def _needs_a_cloud(program: str, root: Path) -> str | None:
    if "/" in program:
        return None if (root / program).is_file() else f"{program} does not exist"
    return None  # named only: running it needs a project (NEEDS_A_CLOUD says why)


def _path_problem(program: str, arguments: list[str], installed: set[str], root: Path) -> str | None:
    relative = program.removeprefix("./")
    if not (root / relative).exists() and relative not in installed:
        return f"{program} does not exist after the set-up"
    if relative == VENV_CLI:
        return cli_parse_problem(arguments)
    if relative == ".venv/bin/python" and arguments and not arguments[0].startswith("-"):
        return None if (root / arguments[0]).is_file() else f"{arguments[0]} does not exist"
    return None


def with_placeholders_filled(word: str) -> str:
    return _PLACEHOLDER.sub(lambda m: PLACEHOLDER_VALUES.get(m[1], re.sub(r"\W", "", m[1])), word)


def cli_parse_problem(arguments: Sequence[str]) -> str | None:
    """None when the CLI's own parser accepts `arguments`; else what it said."""
    from worker_chart_export.cli.main import build_parser

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args([with_placeholders_filled(word) for word in arguments])
    except SystemExit as exit:
        if exit.code not in (0, None):  # --help exits 0
            return said.getvalue().strip() or f"the CLI's parser exited {exit.code}"
    return None


def _key_files_not_ignored(words: Sequence[str], root: Path) -> Iterator[str]:
    for name in key_files_named(words):
        if name.startswith(("~", "/", "../", "$")):
            continue  # outside the checkout: no git to keep it from
        if not is_ignored(name, root):
            yield f"{name} holds API keys but .gitignore does not cover it"


def key_files_named(words: Sequence[str]) -> list[str]:
    names = [word.split("=", 1)[1] for word in words if word.startswith(f"{KEY_FILE_VARIABLE}=")]
    for flag in KEY_FILE_FLAGS:
        names += [word.split("=", 1)[1] for word in words if word.startswith(f"{flag}=")]
        names += [after for before, after in itertools.pairwise(words) if before == flag]
    return [with_placeholders_filled(name) for name in names]


def is_ignored(name: str, root: Path = REPO) -> bool:
    """git's own answer (`git check-ignore`), for a file that need not exist."""
    done = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", name], cwd=root, capture_output=True, timeout=30
    )
    return done.returncode == 0
