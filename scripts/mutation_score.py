"""The mutation score per module, from the results `mutmut run` left in mutants/ (run by
scripts/mutation.sh, from the repository's root).

A mutant is killed when a unit test failed (or timed out) with it; one that survived, or that
no unit test reaches, counts against its module unless scripts/mutation_equivalents.txt lists
it as equivalent: the same behaviour, so no test can tell, shown by the check the entry names
(scripts/mutation_equivalents.py describes the format; the checks run with the unit tests).

Exit 1 when a mutant is neither killed nor listed (each is printed with its diff, ready to be
killed by a test or, if truly equivalent, listed), or when the score is under the target.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from mutation_equivalents import EQUIVALENTS, read_equivalents
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files
from mutmut.utils.format_utils import orig_function_and_class_names_from_key

# caught: a test failed, ran out of time, or its process died (a mutant looping while it
# appends is ended by the kernel, which mutmut reports as "segfault"): the suite saw it
CAUGHT = {"killed", "timeout", "segfault"}
TARGET = 98.0

# Of the Firestore adapters only the pure parts are judged here: how a core plan becomes the
# field paths of one write, the versions remembered from a claim to its finalize, a claim's
# plan. The rest of those modules is I/O, which the integration tests run on the emulator
# (the usage store's plans are closures inside its transactions: their rules are core.usage's,
# judged with core/). Module -> the functions judged (mutmut's keys, fnmatch globs).
PURE_ONLY = {
    "worker_chart_export.adapters.firestore.run_documents": (
        "x_step_field",
        "x_claim_update",
        "x_finalize_update",
        "x_advance_update",
        "xǁWrittenVersionsǁ*",
    ),
    "worker_chart_export.adapters.firestore.leases": ("x_reap_update",),
    "worker_chart_export.adapters.firestore.step_claim": ("xǁClaimRequestǁ*", "x__still_ready"),
}


def judged(name: str) -> bool:
    """Whether a mutant (mutmut's name) counts: PURE_ONLY's functions in its modules, all else."""
    module, _, key = name.partition("__mutmut_")[0].rpartition(".")
    return module not in PURE_ONLY or any(fnmatch(key, pattern) for pattern in PURE_ONLY[module])


@dataclass(frozen=True)
class Mutant:
    name: str  # mutmut's, e.g. worker_chart_export.core.chart_img.usage.x_window_start__mutmut_2
    module: str
    path: Path
    status: str

    @property
    def function(self) -> str:
        function, cls = orig_function_and_class_names_from_key(self.name)
        short = function.rpartition(".")[2]
        return f"{self.module}.{cls}.{short}" if cls else f"{self.module}.{short}"

    def changed_lines(self) -> tuple[str, ...]:
        diff = get_diff_for_mutant(self.name, path=self.path).splitlines()
        return tuple(
            f"{line[0]} {line[1:].strip()}"
            for line in diff
            if line[:1] in "-+" and not line.startswith(("---", "+++"))
        )

    def key(self) -> tuple[str, tuple[str, ...]]:
        return self.function, self.changed_lines()


def all_mutants() -> list[Mutant]:
    mutants = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, exit_code in data.exit_code_by_key.items():
            module = name.rpartition(".")[0]
            mutants.append(Mutant(name, module, path, status_by_exit_code[exit_code]))
    return mutants


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="only these mutants (mutmut name globs)")
    args = parser.parse_args()
    mutants = [
        m
        for m in all_mutants()
        if judged(m.name) and (not args.patterns or any(fnmatch(m.name, p) for p in args.patterns))
    ]
    equivalents = {entry.key: entry.why for entry in read_equivalents(EQUIVALENTS)}
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    unexplained: list[Mutant] = []
    used: set[tuple[str, tuple[str, ...]]] = set()
    for mutant in mutants:
        counts = by_module[mutant.module]
        if mutant.status in CAUGHT:
            counts["killed"] += 1
        elif mutant.status in ("survived", "no tests") and mutant.key() in equivalents:
            counts["equivalent"] += 1
            used.add(mutant.key())
        else:
            counts[mutant.status] += 1
            unexplained.append(mutant)
    for mutant in unexplained:
        print(f"\n{mutant.status.upper()}: {mutant.name}\n  {mutant.function}")
        print("\n".join(f"    {line}" for line in mutant.changed_lines()))
    return report(
        by_module, unexplained, stale=[k for k in equivalents if k not in used] if not args.patterns else []
    )


def report(
    by_module: dict[str, Counter[str]], unexplained: list[Mutant], stale: list[tuple[str, tuple[str, ...]]]
) -> int:
    print(f"\n{'module':<48} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'other':>5} {'score':>7}")
    total: Counter[str] = Counter()
    for module in sorted(by_module):
        counts = by_module[module]
        total.update(counts)
        print(row(module.removeprefix("worker_chart_export."), counts))
    print(row("all", total))
    for function, lines in stale:
        print(f"listed as equivalent but no longer a surviving mutant: {function} {' '.join(lines)}")
    score = percent(total)
    if unexplained:
        print(f"{len(unexplained)} mutant(s) neither killed nor listed in {EQUIVALENTS.name} (above)")
    if score < TARGET:
        print(f"score {score:.1f}% is under the target {TARGET:.0f}%")
    return 1 if unexplained or score < TARGET else 0


def percent(counts: Counter[str]) -> float:
    """Killed among the mutants that can be killed (an equivalent one cannot)."""
    judged = sum(counts.values()) - counts["equivalent"]
    return 100.0 * counts["killed"] / judged if judged else 100.0


def row(name: str, counts: Counter[str]) -> str:
    other = sum(counts.values()) - counts["killed"] - counts["equivalent"]
    return (
        f"{name:<48} {sum(counts.values()):>7} {counts['killed']:>6} {counts['equivalent']:>6} "
        f"{other:>5} {percent(counts):>6.1f}%"
    )


if __name__ == "__main__":
    sys.exit(main())
