"""Cold-start import cost of the CloudEvent entry vs. the bare minimum any such function pays.

Median wall time over fresh interpreter processes of
    python -c "import worker_chart_export.functions.main"
vs. python -c "import functions_framework, google.events.cloud.firestore"
and the ratio (target <= 1.3). With --importtime, also lists the modules the entry imports
beyond the baseline, heaviest first (from `python -X importtime`).

    .venv/bin/python benchmarks/bench_cold_import.py [--runs 7] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# The image installs requirements.prod.lock, which has no rich (a dev extra, for the stack
# command); structlog imports rich whenever it is installed. Both sides run as in the image.
AS_IN_THE_IMAGE = "import sys; sys.modules['rich'] = None; "
ENTRY = AS_IN_THE_IMAGE + "import worker_chart_export.functions.main"
BASELINE = AS_IN_THE_IMAGE + "import functions_framework, google.events.cloud.firestore"
TARGET_RATIO = 1.3


def child_environment(bytecode_cache: str | None) -> dict[str, str]:
    """A deployed image has .pyc files for everything; a checkout with
    PYTHONDONTWRITEBYTECODE=1 recompiles our sources in every process and would charge
    that to the entry alone. So both sides use one private, writable bytecode cache."""
    env = dict(os.environ)
    if bytecode_cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode_cache
    return env


CHILD_ENV: dict[str, str] = dict(os.environ)


def wall_time_ms(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=CHILD_ENV)
    return (time.perf_counter() - started) * 1000


def interleaved_medians_ms(first: str, second: str, runs: int) -> tuple[float, float]:
    """Alternates the two commands so that load from other processes hits both alike."""
    wall_time_ms(first)  # compile .pyc files once: every measured run is a warm-disk cold start
    wall_time_ms(second)
    first_times, second_times = [], []
    for _ in range(runs):
        first_times.append(wall_time_ms(first))
        second_times.append(wall_time_ms(second))
    return statistics.median(first_times), statistics.median(second_times)


def self_import_ms(code: str) -> dict[str, float]:
    """module -> its own import time in ms (children excluded), from `-X importtime`."""
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=CHILD_ENV,
    )
    times: dict[str, float] = {}
    for line in completed.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            times[match.group(4)] = int(match.group(1)) / 1000
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--importtime", action="store_true", help="list what the entry adds")
    parser.add_argument(
        "--as-is",
        action="store_true",
        help="inherit the bytecode settings of this environment instead of a private .pyc cache",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pycache-") as cache:
        CHILD_ENV.clear()
        CHILD_ENV.update(child_environment(None if args.as_is else cache))
        measure(args)


def measure(args: argparse.Namespace) -> None:

    baseline, entry = interleaved_medians_ms(BASELINE, ENTRY, args.runs)
    ratio = entry / baseline
    cache_note = "inherited" if args.as_is else "private .pyc cache for both sides"
    print(
        f"interpreter: {sys.executable}  runs per side: {args.runs} (median wall time, "
        f"interleaved; bytecode: {cache_note})"
    )
    print(f"baseline  {BASELINE!r}: {baseline:7.1f} ms")
    print(f"entry     {ENTRY!r}: {entry:7.1f} ms")
    verdict = "OK" if ratio <= TARGET_RATIO else "OVER TARGET"
    print(f"ratio entry/baseline: {ratio:.2f} (target <= {TARGET_RATIO}) {verdict}")

    if args.importtime or ratio > TARGET_RATIO:
        baseline_modules = self_import_ms(BASELINE)
        extra = {name: ms for name, ms in self_import_ms(ENTRY).items() if name not in baseline_modules}
        print(
            f"modules the entry imports beyond the baseline: {len(extra)}, "
            f"{sum(extra.values()):.1f} ms of own import time; heaviest:"
        )
        for name, ms in sorted(extra.items(), key=lambda item: -item[1])[:15]:
            print(f"  {ms:7.1f}  {name}")


if __name__ == "__main__":
    main()
