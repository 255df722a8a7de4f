"""A listed equivalent mutant, made for real: the entry's changed lines applied to the
function's current source, compiled in its module's namespace, and swapped in for the
original while a check runs (as mutmut's trampoline does), so the module's other functions
call the mutant too. A check then compares what the code does with and without it.

An entry whose original lines are no longer in the function (the code changed) fails here:
the list must be brought up to date, not trusted.
"""

from __future__ import annotations
import __future__

import functools
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[3] / "scripts"))
from mutation_equivalents import Equivalent, read_equivalents

ENTRIES = read_equivalents()


@dataclass(frozen=True)
class Target:
    """Where the mutated function lives: `owner.__dict__[name]` (a module or a class)."""

    module: ModuleType
    owner: Any
    name: str

    @property
    def original(self) -> Any:
        return self.owner.__dict__[self.name]


@functools.cache  # looked up for each call a check compares: thousands of times per entry
def target_of(function: str) -> Target:
    """`package.module.function` or `package.module.Class.method`."""
    parts = function.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        owner: Any = module
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return Target(module, owner, parts[-1])
    raise LookupError(f"no module in {function!r}")


def mutant_source(entry: Equivalent) -> str:
    """The function's source (dedented, decorators included) with the entry's lines swapped."""
    target = target_of(entry.function)
    found = target.original
    function = found.__func__ if isinstance(found, staticmethod | classmethod) else found
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    removed = [line[2:] for line in entry.lines if line.startswith("- ")]
    added = [line[2:] for line in entry.lines if line.startswith("+ ")]
    if len(removed) == len(added):
        for old, new in zip(removed, added, strict=True):
            at = _block_at(entry, lines, [old])
            lines[at] = _indent(lines[at]) + new
    else:  # a call spread over lines, joined into one by the mutant: the block is replaced
        at = _block_at(entry, lines, removed)
        lines[at : at + len(removed)] = [_indent(lines[at]) + new for new in added]
    return "\n".join(lines) + "\n"


def _block_at(entry: Equivalent, lines: list[str], block: list[str]) -> int:
    """Where `block` (stripped lines, one after the other) is in the function, once."""
    size = len(block)
    at = [i for i in range(len(lines) - size + 1) if [line.strip() for line in lines[i : i + size]] == block]
    assert len(at) == 1, f"{entry}: {block!r} is {len(at)} times in {entry.function}: the entry is stale"
    return at[0]


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


@functools.cache
def build_mutant(entry: Equivalent) -> Any:
    target = target_of(entry.function)
    code = compile(
        mutant_source(entry),
        f"<mutant of {entry.function}>",
        "exec",
        flags=__future__.annotations.compiler_flag,  # as the modules have it: annotations stay text
        dont_inherit=True,
    )
    made: dict[str, Any] = {}
    exec(code, target.module.__dict__, made)  # the module's globals: its helpers, its imports
    return made[target.name]


@dataclass
class Reach:
    """How many times the mutant ran while it was in place."""

    calls: int = 0


@contextmanager
def applied(entry: Equivalent) -> Iterator[Reach]:
    """The entry's mutant in place of the function, for the block; counts its calls."""
    target = target_of(entry.function)
    original, mutant = target.original, build_mutant(entry)
    assert inspect.isfunction(mutant), f"{entry}: only plain functions and methods are swapped"
    reach = Reach()

    @functools.wraps(mutant)
    def counted(*args: Any, **kwargs: Any) -> Any:
        reach.calls += 1
        return mutant(*args, **kwargs)

    setattr(target.owner, target.name, counted)
    try:
        yield reach
    finally:
        setattr(target.owner, target.name, original)


def late(owner: Any, name: str, /, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """`owner.name(*args, **kwargs)`, the function looked up when called: the mutant then."""
    return lambda: getattr(owner, name)(*args, **kwargs)


def outcome(call: Callable[[], Any]) -> Any:
    """What a call gives: its value, or the exception's type and message."""
    try:
        return ("returned", call())
    except Exception as exc:  # an exception is an outcome to compare
        return ("raised", type(exc).__name__, str(exc))


def assert_same(entry: Equivalent, call: Callable[[], Any], *, reaches: bool = True) -> Any:
    """`call` gives the same with the entry's mutant as with the code; returns that. With
    `reaches` (the default) the call must have run the mutant: a check that never does
    proves nothing."""
    expected = outcome(call)
    with applied(entry) as reach:
        got = outcome(call)
    assert got == expected, f"{entry} changes what {call} gives"
    assert reach.calls or not reaches, f"{entry}: this call never ran the mutant"
    return expected


CHECKS: dict[str, Callable[..., Any]] = {}


def checks(test: Callable[..., Any]) -> Any:
    """Marks `test` as the check of every entry whose `check:` line names it; the test runs
    once per such entry (its `entry` argument), marked `slow`: one by one they are quick, but
    together they take longer than the rest of tests/unit, so the quick lane leaves them to the
    full test command (docs/testing.md, "Lanes")."""
    CHECKS[test.__name__] = test
    entries = [entry for entry in ENTRIES if entry.check == test.__name__]
    return pytest.mark.slow(pytest.mark.parametrize("entry", entries, ids=str)(test))
