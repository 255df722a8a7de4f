#!/usr/bin/env bash
# Mutation testing (docs/testing.md, "Mutation testing"): mutmut mutates core/, the limiter's account
# choice, service/, functions/, adapters/chart_img/ and the pure parts of adapters/firestore/
# (pyproject [tool.mutmut]), runs the unit tests against each mutant, then
# scripts/mutation_score.py prints the score per module and every mutant neither killed nor
# listed as equivalent in scripts/mutation_equivalents.txt (exit 1 if any, or under 98%).
#
#   bash scripts/mutation.sh                          every mutant, from scratch
#   bash scripts/mutation.sh src/worker_chart_export/core/chart_img/usage.py ...   only these files' mutants
#   bash scripts/mutation.sh --score                  the score of the last run, without running
#   bash scripts/mutation.sh --resume [files ...]     go on with an interrupted run (every mutant
#                                                     takes hours on 2 cores): only the mutants
#                                                     not judged yet, and only on the commit it began
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || bash scripts/bootstrap.sh

patterns=()
score_only=false
resume=false
for arg in "$@"; do
    case "$arg" in
        --score) score_only=true ;;
        --resume) resume=true ;;
        *.py)
            # src/worker_chart_export/core/chart_img/usage.py -> worker_chart_export.core.chart_img.usage.*
            module=${arg#src/}
            module=${module%.py}
            patterns+=("${module//\//.}.*")
            ;;
        *) echo "usage: $0 [--score | --resume] [src/worker_chart_export/<module>.py ...]" >&2; exit 2 ;;
    esac
done

# The commit the verdicts hold for; "-modified" when src/, tests/ or pyproject.toml differ
# from it (such a run cannot be resumed: nobody could tell what it was judged against).
checkout=$(git rev-parse HEAD)
[ -z "$(git status --porcelain -- src tests pyproject.toml)" ] || checkout="$checkout-modified"

if [ "$score_only" = false ]; then
    if [ "$resume" = true ]; then
        # mutmut keeps each verdict as it comes and judges again only the mutants without one
        began=$(cat mutants/commit 2>/dev/null || echo "no run")
        if [ "$began" != "$checkout" ] || [[ "$checkout" == *-modified ]]; then
            echo "cannot resume: mutants/ was begun on $began, the checkout is $checkout" \
                "(verdicts of other code or tests would be mixed in); run without --resume" >&2
            exit 2
        fi
    else
        # A fresh copy each time: results kept from an earlier run may predate the tests as they are.
        rm -rf mutants
        mkdir mutants
        echo "$checkout" >mutants/commit
    fi
    # tests/conftest.py's profile: no example database shared between mutants, fixed draws
    export HYPOTHESIS_PROFILE=mutation
    log=$(mktemp)
    start=$(date +%s)
    .venv/bin/mutmut run --max-children "$(nproc)" "${patterns[@]}" >"$log" 2>&1 || {
        tail -n 40 "$log" >&2
        echo "mutmut failed (its whole output: $log)" >&2
        exit 1
    }
    cat "$log" >>mutants/run.log && rm -f "$log"
    echo "mutmut ran in $(( $(date +%s) - start )) s (its output: mutants/run.log)"
fi
echo "verdicts of commit $(cat mutants/commit 2>/dev/null || echo unknown)"
exec .venv/bin/python scripts/mutation_score.py "${patterns[@]}"
