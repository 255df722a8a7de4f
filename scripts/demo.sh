#!/usr/bin/env bash
# Installs, then runs the bundled sample flow_run in mock mode (no cloud account, no network).
# Output: out/demo/ (PNGs + manifest under gcs/<bucket>/charts/..., the updated flow_run under flow_runs/).
# Each step says what it does first: the install is quiet (the installers' own output hidden)
# and takes about 15 s the first time (a fresh clone: 14 s, the demo included; 2 s after).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: 1/2 installing the project and its pinned dependencies into .venv/ (scripts/bootstrap.sh; about 15 s the first time, a moment after)" >&2
bash scripts/bootstrap.sh
echo "demo: 2/2 rendering the bundled sample flow_run (fixtures/flow_run.sample.json) in mock mode: recorded answers, no network, no cloud account" >&2
rm -rf out/demo && mkdir -p out
.venv/bin/worker-chart-export run-local \
  --flow-run-path fixtures/flow_run.sample.json \
  --charts-api-mode mock \
  --output-dir out/demo \
  --output-summary text 2>out/demo.log || { status=$?; echo "run-local failed (exit $status); logs: out/demo.log" >&2; exit $status; }
echo "logs (JSON lines): out/demo.log"
