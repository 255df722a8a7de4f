#!/usr/bin/env bash
# Installs, then runs the whole test suite: unit, integration (Firestore emulator + fake-gcs-server,
# started by the tests themselves) and end-to-end. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/install_test_tools.sh  # Debian packages: shellcheck, chromium, chromium-driver
# SKIP_BROWSER_TEST=1: no chromium wanted (install_test_tools.sh installs none), no browser test.
not_wanted=()
[[ "${SKIP_BROWSER_TEST:-}" == 1 ]] && not_wanted=(--ignore=tests/integration/test_view_chromium.py)
mkdir -p out
# The Firestore emulator ships with the Google Cloud CLI (component cloud-firestore-emulator) and
# needs Java; fail here with a clear message rather than deep inside a fixture.
JAR=${FIRESTORE_EMULATOR_JAR:-/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar}
command -v java >/dev/null || { echo "java not found: the Firestore emulator needs a JRE (apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
# the deploy tests are judged by the installed CLI's own parser: without it they would skip,
# checking nothing, so the test command refuses to run instead
command -v gcloud >/dev/null || { echo "gcloud not found: the deploy tests need the Google Cloud CLI (its parser judges every deploy call)" >&2; exit 1; }
[ -f "$JAR" ] || { echo "Firestore emulator not found at $JAR: install the Google Cloud CLI component cloud-firestore-emulator (or set FIRESTORE_EMULATOR_JAR)" >&2; exit 1; }
.venv/bin/ruff check src tests scripts benchmarks
.venv/bin/mypy
# the layers of docs/architecture.md as import contracts (pyproject [tool.importlinter])
.venv/bin/lint-imports --no-cache
shellcheck scripts/*.sh deploy/*.sh .ci/run
.venv/bin/python -m pytest "${not_wanted[@]}" "$@"
