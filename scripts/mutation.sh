#!/usr/bin/env bash
# Mutation testing (README "Mutation testing"): mutmut mutates core/, the limiter's account
# choice, service/, functions/, adapters/chart_img/ and the pure parts of adapters/firestore/
# (pyproject [tool.mutmut]), runs the unit tests against each mutant, then
# scripts/mutation_score.py prints the score per module and every mutant neither killed nor
# listed as equivalent in scripts/mutation_equivalents.txt (exit 1 if any, or under 98%).
#
#   bash scripts/mutation.sh                          every mutant, from scratch
#   bash scripts/mutation.sh src/worker_chart_export/core/chart_img/usage.py ...   only these files' mutants
#   bash scripts/mutation.sh --score                  the score of the last run, without running
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || bash scripts/bootstrap.sh

patterns=()
score_only=false
for arg in "$@"; do
    case "$arg" in
        --score) score_only=true ;;
        *.py)
            # src/worker_chart_export/core/chart_img/usage.py -> worker_chart_export.core.chart_img.usage.*
            module=${arg#src/}
            module=${module%.py}
            patterns+=("${module//\//.}.*")
            ;;
        *) echo "usage: $0 [--score] [src/worker_chart_export/<module>.py ...]" >&2; exit 2 ;;
    esac
done

if [ "$score_only" = false ]; then
    # A fresh copy each time: results kept from an earlier run may predate the tests as they are.
    rm -rf mutants
    log=$(mktemp)
    start=$(date +%s)
    .venv/bin/mutmut run --max-children "$(nproc)" "${patterns[@]}" >"$log" 2>&1 || {
        tail -n 40 "$log" >&2
        echo "mutmut failed (its whole output: $log)" >&2
        exit 1
    }
    mv "$log" mutants/run.log
    echo "mutmut ran in $(( $(date +%s) - start )) s (its output: mutants/run.log)"
fi
exec .venv/bin/python scripts/mutation_score.py "${patterns[@]}"
