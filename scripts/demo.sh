#!/usr/bin/env bash
# Installs, then runs the bundled sample flow_run in mock mode (no cloud account, no network).
# Output: out/demo/ (PNGs + manifest under gcs/<bucket>/charts/..., the updated flow_run under flow_runs/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
rm -rf out/demo && mkdir -p out
.venv/bin/worker-chart-export run-local \
  --flow-run-path fixtures/flow_run.sample.json \
  --charts-api-mode mock \
  --output-dir out/demo \
  --output-summary text 2>out/demo.log || { status=$?; echo "run-local failed (exit $status); logs: out/demo.log" >&2; exit $status; }
echo "logs (JSON lines): out/demo.log"
