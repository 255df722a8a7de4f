#!/usr/bin/env bash
# Creates .venv (if needed) and installs the pinned dependencies plus the project.
# Sourced by demo.sh and test.sh; safe to run again (pip skips what is installed, and is not
# asked at all while .venv/ holds what this lock and pyproject.toml say).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# pip takes ~10 s of CPU to find every pin already installed: as tox does, skip it while the
# inputs of the last install into this .venv/ (its stamp) are unchanged
stamp=.venv/installed-from.sha256
inputs="$(cat requirements.lock pyproject.toml | sha256sum)"
if [[ "$(cat "${stamp}" 2>/dev/null)" != "${inputs}" ]]; then
  # Every file pip downloads must match a hash in the lock (README "Dependencies"); the project
  # itself has no hash, so it is installed by a second command, outside hash-checking mode.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "${inputs}" >"${stamp}"
fi
# the project is in .venv/, not on PATH: say how to call it (the README writes every command so)
echo "bootstrap: ready; the command is .venv/bin/worker-chart-export (try .venv/bin/worker-chart-export --help)" >&2
