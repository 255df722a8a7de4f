"""The console script `worker-chart-export`: loads the CLI inside a guard, so that Ctrl-C at
any moment, even while Python is still importing it (a second or more on a busy machine), is
one line and exit 130, never a KeyboardInterrupt traceback. Nothing is imported above it."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # command_surface's, not imported: importing is what this guards


def main() -> int:
    try:
        from worker_chart_export.cli.main import main as run

        return run()
    except KeyboardInterrupt:
        print("worker-chart-export: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
