#!/usr/bin/env bash
# The test command, in two lanes (docs/testing.md). Extra arguments go to pytest.
#   bash scripts/test.sh          everything: unit, integration (Firestore emulator + fake-gcs-server,
#                                 started by the tests themselves), end-to-end, deploy. Needs Java,
#                                 the Google Cloud CLI with its Firestore emulator, and root once
#                                 (install_test_tools.sh: shellcheck, chromium). CI runs both.
#   bash scripts/test.sh --unit   the static checks and the unit tests: no Java, no gcloud, no root,
#                                 no network but the package index bootstrap.sh installs from
#                                 (without the tests marked `slow`: see below).
# Both spread the tests over the machine's cores (pytest-xdist); each worker is a pytest session
# of its own, with its own emulators when it needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=full
if [[ "${1:-}" == --unit ]]; then
    lane=unit
    shift
fi
# Each pytest worker and each served or CLI process the tests start imports the same modules:
# they share the compiled bytecode (and pytest's rewritten test modules) in the checkout's
# __pycache__ folders, which git ignores, instead of compiling them again in every process.
unset PYTHONDONTWRITEBYTECODE
bash scripts/bootstrap.sh
# -n: one worker per core and one more: part of the suite waits on events (served workers,
# emulators), which a third worker fills (full lane on 2 idle cores at 8c28eb1: pytest 8 min 8 s
# to 8 min 38 s with 3 workers, 10 min 43 s with 2; docs/testing.md); loadscope: with the
# scopes tests/harness/lanes.py gives (a service folder's file, or files kept together, on one
# worker; a unit test anywhere)
parallel=(-n "$(($(nproc) + 1))" --dist loadscope)

static_checks() {
    .venv/bin/ruff check src tests scripts benchmarks
    .venv/bin/mypy
    # the layers of docs/architecture.md as import contracts (pyproject [tool.importlinter])
    .venv/bin/lint-imports --no-cache
}

if [[ "${lane}" == unit ]]; then
    static_checks
    # java and gcloud shadowed on PATH by stand-ins that fail naming themselves: a unit test
    # reaching for either (an emulator started, a CLI call) fails instead of quietly needing them
    shadow="$(mktemp -d)"
    trap 'rm -rf "${shadow}"' EXIT
    for tool in java gcloud; do
        printf '#!/bin/sh\necho "%s called in the unit lane (scripts/test.sh --unit has none): $*" >&2\nexit 1\n' \
            "${tool}" >"${shadow}/${tool}"
        chmod +x "${shadow}/${tool}"
    done
    # -m: the tests marked slow (pyproject markers: the equivalent mutants' comparisons, CLI
    # processes, a wheel build) are left to the full command; `-m ''` after --unit runs them too
    PATH="${shadow}:${PATH}" .venv/bin/python -m pytest "${parallel[@]}" -m "not slow" tests/unit "$@"
    exit
fi

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
static_checks
shellcheck scripts/*.sh deploy/*.sh .ci/run
.venv/bin/python -m pytest "${parallel[@]}" "${not_wanted[@]}" "$@"
