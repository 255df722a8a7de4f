"""The list of equivalent mutants, scripts/mutation_equivalents.txt, read (no mutmut needed:
scripts/mutation_score.py and tests/unit/mutation/ both read it through this module).

An entry names a mutant by what stays true across runs (its module, function and changed
lines, not mutmut's numbers, which shift whenever a function changes), says why no test can
tell it from the code, and names the check that shows it: a test function of
tests/unit/mutation/ (test_equivalents.py, or a test_*_equivalents.py it imports) that
applies exactly these changed lines to the function and compares it with the original over
the inputs that matter (exhaustively where the domain is small, else with hypothesis):

    worker_chart_export.core.chart_img.usage.window_start
      - return now.astimezone(UTC).strftime("%Y-%m-%dT00:00:00Z")
      + return now.astimezone(None).strftime("%Y-%m-%dT00:00:00Z")
      why: <one line>
      check: test_<name>
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

EQUIVALENTS = Path(__file__).with_name("mutation_equivalents.txt")


@dataclass(frozen=True)
class Equivalent:
    function: str  # module.function or module.Class.method
    lines: tuple[str, ...]  # "- original" and "+ mutant", stripped, as `mutmut show` prints them
    why: str
    check: str  # the test function of tests/unit/mutation/ that shows it
    line: int  # where the entry starts in the file

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return self.function, self.lines

    def __str__(self) -> str:
        return f"{self.function}:{self.line}"


def read_equivalents(path: Path = EQUIVALENTS) -> list[Equivalent]:
    """Every entry, in file order; a malformed one stops the reader, naming its line."""
    entries: list[Equivalent] = []
    function, lines, why, start = "", list[str](), "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if not raw.startswith(" ") and not function:
            function, lines, why, start = text, [], "", number
        elif text.startswith(("- ", "+ ", "-", "+")) and function and not why:
            lines.append(f"{text[0]} {text[1:].strip()}")
        elif text.startswith("why:") and function and lines and not why and text[4:].strip():
            why = text[4:].strip()
        elif text.startswith("check:") and why and text[6:].strip():
            entries.append(Equivalent(function, tuple(lines), why, text[6:].strip(), start))
            function = ""
        else:
            expected = "a function name, '- '/'+ ' lines, 'why: ...', then 'check: test_...'"
            sys.exit(f"{path}:{number}: expected {expected}")
    if function:
        sys.exit(f"{path}:{start}: the entry of {function} ends without its 'why:' and 'check:' lines")
    return entries
