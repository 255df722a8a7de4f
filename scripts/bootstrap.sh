#!/usr/bin/env bash
# Creates .venv (if needed) and installs the pinned dependencies plus the project.
# Sourced by demo.sh and test.sh; safe to run again (pip skips what is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
