"""What every `worker-chart-export` command shares: the exit codes, the parser class (a
mistake is one line), how a subcommand is registered (its summary, description and exit
codes in its --help, and the function that runs it), and how a printed hint names the
program so that the hint works when pasted.

Every error is one stderr line, `worker-chart-export <command>: error: <what is wrong>`,
and exit 2; argparse's own mistakes (an unknown flag, a bad value) take the same form.

A leaf below cli/ and tools/ (both register subcommands with it; the CLI runs the tools), so
neither entry point imports the other's package back.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

PROG = "worker-chart-export"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130  # 130: the shell's for SIGINT
# what exit 2 and 130 mean, the same words in every --help
USAGE_MEANING = "a mistake in the command or the configuration: one stderr line naming it"
INTERRUPTED_MEANING = "interrupted (Ctrl-C or SIGTERM)"

Run = Callable[[argparse.Namespace], int]
Number = TypeVar("Number", int, float)


def program() -> str:
    """The program as the user can type it again: `worker-chart-export` when PATH finds this
    very script, else the path it was started by (`.venv/bin/worker-chart-export` after
    `bash scripts/bootstrap.sh`), relative to the current folder when it lies below it."""
    script = _script()
    if script is None:
        return PROG
    found = shutil.which(PROG)
    if found is not None and os.path.realpath(found) == os.path.realpath(script):
        return PROG
    relative = os.path.relpath(script)
    shown = relative if not relative.startswith("..") else os.path.abspath(script)
    return shlex.quote(shown)


def _script() -> str | None:
    started_by = sys.argv[0] if sys.argv else ""
    if os.path.basename(started_by) == PROG and os.path.isfile(started_by):
        return started_by
    beside = Path(sys.executable).parent / PROG  # `python -m`, `-c`, a test: the venv's script
    return str(beside) if beside.is_file() else None


def command_line(*words: str) -> str:
    """A command to print as a hint: the program as typed (program()), then `words`, each
    quoted for a POSIX shell where it needs to be."""
    return " ".join([program(), *(shlex.quote(word) for word in words)])


def error_line(where: str, message: str) -> str:
    """`where` is the command's prog (`worker-chart-export templates sync`)."""
    return f"{where}: error: {message}"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose mistakes are one line and exit 2, with where to read more;
    an unknown argument is named by the subcommand it was given to."""

    def error(self, message: str) -> NoReturn:
        _usage_error(self.prog, message)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            _usage_error(
                str(getattr(parsed, "where", self.prog)), f"unrecognized arguments: {' '.join(extras)}"
            )
        return parsed


def _usage_error(prog: str, message: str) -> NoReturn:
    more = prog.replace(PROG, program(), 1)
    sys.stderr.write(error_line(prog, f"{message} (see {more} --help)") + "\n")
    sys.exit(EXIT_USAGE)


def add_command(
    commands: Any,
    name: str,
    *,
    summary: str,
    description: str,
    exit_codes: Mapping[int, str],
    run: Run,
) -> argparse.ArgumentParser:
    """Register subcommand `name`: `summary` in the parent's list, `description` and the exit
    codes in its own --help, `run(args)` what main calls (`set_defaults(func=run)`: args.func;
    args.where = its prog)."""
    epilog = "exit status:\n" + "\n".join(
        textwrap.fill(meaning, 79, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, meaning in exit_codes.items()
    )
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=filled(description),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run, where=parser.prog)
    return parser


def filled(text: str, width: int = 79) -> str:
    """Paragraphs (blank-line separated) filled to `width`; a paragraph with an indented line
    (a list, a diagram) is kept as written."""
    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines = paragraph.splitlines()
        if any(line.startswith(" ") for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(textwrap.fill(" ".join(line.strip() for line in lines), width))
    return "\n\n".join(paragraphs)


def add_group(commands: Any, name: str, *, summary: str, description: str) -> Any:
    """A command made of subcommands (`templates sync`, `stack up`): its own subparsers."""
    parser = commands.add_parser(name, help=summary, description=description)
    return parser.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND", title="commands")


def _parsed(text: str, convert: Callable[[str], Number], what: str) -> Number:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def port_number(text: str) -> int:
    """argparse type of a TCP port to listen on."""
    port = _parsed(text, int, "a port number (1-65535)")
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range: a port is 1-65535")
    return port


def positive_number(text: str) -> float:
    """argparse type of a duration in seconds."""
    value = _parsed(text, float, "a number of seconds")
    if not 0 < value < float("inf"):  # NaN too
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def positive_integer(text: str) -> int:
    value = _parsed(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value
