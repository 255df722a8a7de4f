#!/usr/bin/env bash
# Creates .venv (if needed) and installs the pinned dependencies plus the project.
# Sourced by demo.sh and test.sh; safe to run again (pip skips what is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# Every file pip downloads must match a hash in the lock (README "Dependencies"); the project
# itself has no hash, so it is installed by a second command, outside hash-checking mode.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
# the project is in .venv/, not on PATH: say how to call it (the README writes every command so)
echo "bootstrap: ready; the command is .venv/bin/worker-chart-export (try .venv/bin/worker-chart-export --help)" >&2
