"""One CLI surface: every subcommand's --help says what it does, its defaults and its exit
status; every mistake, whatever the subcommand, is one stderr line `worker-chart-export
<command>: error: ...` and exit 2: no usage block, no traceback, no library's wording.

The table of mistakes below names every subcommand (a new one without mistakes fails
`test_the_table_covers_every_subcommand`); each mistake is what a newcomer types, run
through `main` as the console script runs it.
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.builders import SAMPLE_FLOW_RUN
from worker_chart_export.cli.main import build_parser, main
from worker_chart_export.command_surface import command_line, program

ONE_LINE = re.compile(r"^worker-chart-export(?: [a-z-]+)*: error: \S")
LIBRARY_WORDING = ("Traceback", "Input should", "Value error", "[ERROR]", "usage:")
_GOOGLE_ENV = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "FIRESTORE_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "CHARTS_API_MODE",
    "CHARTS_BUCKET",
    "CHART_IMG_ACCOUNTS_JSON",
    "CHART_IMG_ACCOUNTS_SECRET",
    "CHARTS_LOCAL_OUTPUT_DIR",
    "CHART_TEMPLATES_DIR",
    "FUNCTION_TARGET",
    "PORT",
)


def leaf_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every runnable subcommand's parser, by its command (`templates sync`)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    if child.get_default("func") is not None:
                        found[child.prog.removeprefix("worker-chart-export ")] = child
                    walk(child)

    walk(build_parser())
    return found


def test_every_subcommand_says_what_it_does_its_defaults_and_exit_status() -> None:
    parsers = leaf_parsers()
    assert {"run-local", "serve", "advance", "reap", "submit", "accounts", "view", "stack up"} <= set(parsers)
    assert "templates sync" in parsers
    for command, parser in parsers.items():
        text = parser.format_help()
        assert parser.description and len(parser.description) >= 60, command
        assert "exit status:" in text and re.search(r"^  0 ", text, re.M), (command, text)
        assert re.search(r"^  2    a mistake in the command or the configuration", text, re.M), command
        required_together = {
            id(action)
            for group in parser._mutually_exclusive_groups
            if group.required
            for action in group._group_actions
        }
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (command, action.dest)
            takes_a_value = action.nargs != 0 and action.option_strings
            flag_with_default = isinstance(action, argparse.BooleanOptionalAction)
            if (
                takes_a_value and not action.required and id(action) not in required_together
            ) or flag_with_default:
                assert "default" in action.help, (command, action.option_strings, action.help)


def test_the_top_level_help_is_for_users() -> None:
    text = build_parser().format_help()
    for developer_word in ("wires adapters", "execute_step", "Parses flags"):
        assert developer_word not in text
    for start in ("stack up", "run-local", "view"):
        assert start in text
    assert "exit status:" in text
    for command in (
        "stack",
        "run-local",
        "view",
        "advance",
        "reap",
        "submit",
        "accounts",
        "templates",
        "serve",
    ):
        assert re.search(rf"^    {command} ", text, re.M) or f"    {command}\n" in text, command


@dataclass(frozen=True)
class Mistake:
    command: str  # the prog after `worker-chart-export` ("" for the top level)
    argv: tuple[str, ...]
    names: str  # what the line must say
    env: dict[str, str] = field(default_factory=dict)


SAMPLE = str(SAMPLE_FLOW_RUN)
MISTAKES = [
    Mistake("", (), "the following arguments are required: COMMAND"),
    Mistake("", ("bogus",), "invalid choice: 'bogus'"),
    Mistake("", ("--verbose",), "the following arguments are required: COMMAND"),
    # run-local
    Mistake("run-local", ("run-local",), "the following arguments are required: --flow-run-path"),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", SAMPLE, "--verbose"),
        "unrecognized arguments: --verbose",
    ),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", "/none.json"),
        "--flow-run-path /none.json: No such file",
    ),
    Mistake("run-local", ("run-local", "--flow-run-path", "{tmp}/bad.json"), "not valid JSON"),
    Mistake(
        "run-local", ("run-local", "--flow-run-path", SAMPLE, "--step-id", "nope"), "--step-id: step 'nope'"
    ),
    Mistake(
        "run-local", ("run-local", "--flow-run-path", SAMPLE, "--charts-api-mode", "fake"), "invalid choice"
    ),
    Mistake(
        "run-local", ("run-local", "--flow-run-path", SAMPLE, "--charts-bucket", "Bad_Bucket"), "bucket name"
    ),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", SAMPLE, "--accounts-config-path", "/none.json"),
        "--accounts-config-path /none.json: No such file",
    ),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", SAMPLE),
        "CHART_CONCURRENCY: must be at least 1",
        {"CHART_CONCURRENCY": "0"},
    ),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", SAMPLE),
        "CHART_IMG_BURST: must be a whole number",
        {"CHART_IMG_BURST": "x"},
    ),
    Mistake(
        "run-local",
        ("run-local", "--flow-run-path", SAMPLE),
        "CHARTS_API_MODE: must be 'real', 'mock' or 'record'",
        {"CHARTS_API_MODE": "fake"},
    ),
    Mistake(
        "run-local", ("run-local", "--flow-run-path", SAMPLE, "--output-dir", "{tmp}/a_file"), "--output-dir"
    ),
    # serve
    Mistake(
        "serve", ("serve", "--port", "99999"), "argument --port: 99999 is out of range: a port is 1-65535"
    ),
    Mistake("serve", ("serve", "--port", "0"), "argument --port: 0 is out of range"),
    Mistake("serve", ("serve", "--port", "http"), "argument --port: 'http' is not a port number"),
    Mistake("serve", ("serve", "--target", "nope"), "argument --target: invalid choice"),
    Mistake(
        "serve",
        ("serve", "--host", "127.0.0.1", "--port", "{busy_port}"),
        "127.0.0.1:{busy_port} is in use",
        {"CHARTS_API_MODE": "mock"},
    ),
    Mistake(
        "serve",
        ("serve", "--port", "{busy_port}"),
        "0.0.0.0:{busy_port} is in use",
        {"CHARTS_API_MODE": "mock"},
    ),
    Mistake(
        "serve",
        ("serve", "--host", "no-such-host.invalid", "--port", "8080"),
        "--host 'no-such-host.invalid' is not an address",
        {"CHARTS_API_MODE": "mock"},
    ),
    Mistake("serve", ("serve",), "PORT: must be at most 65535", {"PORT": "70000", "CHARTS_API_MODE": "mock"}),
    Mistake("serve", ("serve",), "no CHART-IMG accounts configured", {"CHARTS_API_MODE": "real"}),
    # view
    Mistake("view", ("view",), "the following arguments are required: MANIFEST"),
    Mistake("view", ("view", "/none"), "/none: no such file or folder"),
    Mistake("view", ("view", SAMPLE), "not a valid ChartsOutputsManifest"),
    Mistake("view", ("view", "gs://"), "gs://"),
    # advance
    Mistake("advance", ("advance",), "one of the arguments --run-id --flow-run-path is required"),
    Mistake("advance", ("advance", "--run-id", "a", "--flow-run-path", SAMPLE), "not allowed with argument"),
    Mistake("advance", ("advance", "--run-id", "a/b"), "--run-id 'a/b': document id contains '/'"),
    Mistake(
        "advance",
        ("advance", "--run-id", "a", "--output-dir", "out"),
        "--output-dir goes with --flow-run-path",
    ),
    Mistake(
        "advance", ("advance", "--flow-run-path", "/none.json"), "--flow-run-path /none.json: No such file"
    ),
    # reap
    Mistake("reap", ("reap", "--batch", "0"), "argument --batch: 0 must be at least 1"),
    Mistake(
        "reap", ("reap", "--max-attempts", "three"), "argument --max-attempts: 'three' is not a whole number"
    ),
    Mistake("reap", ("reap",), "STEP_MAX_ATTEMPTS: must be at least 1", {"STEP_MAX_ATTEMPTS": "0"}),
    # submit
    Mistake("submit", ("submit",), "the following arguments are required: --flow-run-path"),
    Mistake(
        "submit", ("submit", "--flow-run-path", "/none.json"), "--flow-run-path /none.json: No such file"
    ),
    Mistake(
        "submit",
        ("submit", "--flow-run-path", SAMPLE, "--timeout", "0"),
        "argument --timeout: 0 must be a positive",
    ),
    Mistake(
        "submit",
        ("submit", "--flow-run-path", SAMPLE, "--timeout", "nan"),
        "argument --timeout: nan must be a positive",
    ),
    Mistake("submit", ("submit", "--flow-run-path", SAMPLE, "--run-id", "no spaces"), "not a valid flow_run"),
    # accounts
    Mistake(
        "accounts", ("accounts", "--check-file", "/none.json"), "accounts file /none.json: cannot be read"
    ),
    Mistake(
        "accounts",
        ("accounts", "--check-file", "{tmp}/bad.json"),
        "accounts file {tmp}/bad.json: not valid JSON",
    ),
    Mistake(
        "accounts",
        ("accounts", "--check-file", "{tmp}/bad.json", "--json"),
        "--check-file takes no other flag",
    ),
    Mistake(
        "accounts",
        ("accounts", "--accounts-config-path", "/none.json"),
        "--accounts-config-path /none.json: No such file",
    ),
    Mistake(
        "accounts", ("accounts", "--output-dir", "{tmp}/a_file"), "output folder {tmp}/a_file is not a folder"
    ),
    # templates sync
    Mistake("templates", ("templates",), "the following arguments are required: COMMAND"),
    Mistake(
        "templates sync", ("templates", "sync", "--dir", "/none", "--dry-run"), "--dir /none: not a folder"
    ),
    Mistake(
        "templates sync",
        ("templates", "sync", "--dry-run"),
        "CHART_IMG_PLAN: unknown CHART-IMG plan 'GOLD'",
        {"CHART_IMG_PLAN": "GOLD"},
    ),
    # stack up
    Mistake("stack", ("stack",), "the following arguments are required: COMMAND"),
    Mistake("stack up", ("stack", "up", "--flow-run", "/none.json"), "--flow-run /none.json: No such file"),
    Mistake("stack up", ("stack", "up", "extra"), "unrecognized arguments: extra"),
    Mistake("stack up", ("stack", "up", "--timeout", "-1"), "argument --timeout: -1 must be a positive"),
    Mistake(
        "stack up", ("stack", "up", "--lease-seconds", "x"), "argument --lease-seconds: 'x' is not a number"
    ),
    Mistake(
        "stack up",
        ("stack", "up", "--charts-api-mode", "record"),
        "argument --charts-api-mode: invalid choice",
    ),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on, on every address."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def test_the_table_covers_every_subcommand() -> None:
    assert set(leaf_parsers()) <= {mistake.command for mistake in MISTAKES}


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: " ".join(m.argv)[:60] or "(nothing)")
def test_each_mistake_is_one_line_and_exit_2(
    mistake: Mistake,
    tmp_path: Path,
    busy_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in _GOOGLE_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in mistake.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # no metadata server to ask
    monkeypatch.chdir(tmp_path)  # nothing lands in the repository
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "a_file").write_text("not a folder")

    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{busy_port}", str(busy_port))

    try:
        code = main([filled(word) for word in mistake.argv])
    except SystemExit as exit:  # argparse's own mistakes end the parse
        code = int(exit.code or 0)
    out, err = capsys.readouterr()

    assert code == 2, (out, err)
    assert out == "", out
    lines = err.splitlines()
    assert len(lines) == 1, err
    [line] = lines
    where = f"worker-chart-export {mistake.command}".rstrip()
    assert ONE_LINE.match(line) and line.startswith(f"{where}: error: "), line
    assert filled(mistake.names) in line, line
    assert not any(word in line for word in LIBRARY_WORDING), line


def test_hints_name_the_program_as_it_can_be_typed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Path(sys.executable).parent / "worker-chart-export"
    monkeypatch.setattr(sys, "argv", [str(script), "stack", "up"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as after `bash scripts/bootstrap.sh`
    venv = script.parents[1]
    monkeypatch.chdir(venv.parent)  # the checkout's root: the path from there
    assert program() == f"{venv.name}/bin/worker-chart-export"
    assert command_line("view", "a folder") == f"{venv.name}/bin/worker-chart-export view 'a folder'"
    monkeypatch.chdir(tmp_path)  # elsewhere: the whole path
    assert program() == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")  # activated: the bare name
    assert program() == "worker-chart-export"
