"""`worker-chart-export advance`, `reap` and `submit`: advance_flow, the reaper and a
producer from a shell.

`advance --run-id ID` runs advance_flow on a Firestore flow_run (the emulator's with
FIRESTORE_EMULATOR_HOST), as its CloudEvent function would on that version;
`advance --flow-run-path FILE` runs it on run-local's state of a local flow_run.
`reap` runs one reaper pass over Firestore, as Cloud Scheduler's call does.
`submit` creates a flow_run and follows it (submit.py).
`advance` and `reap` take their parts from bootstrap's Runtime around a checked Firestore
client (`cli_runtime`): a failure is one line and exit 2. Each prints one sentence saying
what it did, or with --json the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.cli.submit import add_submit_command
from worker_chart_export.command_surface import (
    EXIT_FAILED,
    EXIT_OK,
    USAGE_MEANING,
    add_command,
    positive_integer,
)
from worker_chart_export.core.document_ids import document_id_problem
from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.step.reaping import LeaseFate, ReapReport
from worker_chart_export.logs import configure_logging
from worker_chart_export.service.advance import AdvanceEffect
from worker_chart_export.settings import load_settings

FIRESTORE = "Firestore (the emulator's with FIRESTORE_EMULATOR_HOST, else GOOGLE_CLOUD_PROJECT's)"


def add_flow_commands(commands: Any) -> None:
    advance = add_command(
        commands,
        "advance",
        summary="run advance_flow on one flow_run by hand: make steps READY, set the run status",
        description=(
            "Runs advance_flow's rules (docs/flow_rules.md) on one flow_run, as its CloudEvent\n"
            "function does on every write: PENDING steps whose dependencies are done become READY,\n"
            "and the run status follows.\n"
            f"--run-id: a flow_runs document in {FIRESTORE}.\n"
            "--flow-run-path: run-local's state of a local file (<output-dir>/flow_runs/<runId>.json)."
        ),
        exit_codes={0: "done (also when there was nothing to change)", 2: USAGE_MEANING},
        run=run_advance,
    )
    where = advance.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-id", metavar="ID", help="a flow_runs/{runId} document in Firestore")
    where.add_argument(
        "--flow-run-path", type=Path, metavar="FILE", help="a local flow_run JSON (run-local's state of it)"
    )
    advance.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="with --flow-run-path: run-local's output folder (default ./out)",
    )
    advance.add_argument("--json", action="store_true", help="print one JSON object instead of a sentence")
    reap = add_command(
        commands,
        "reap",
        summary="one reaper pass by hand: take back steps whose worker died (lease expired)",
        description=(
            f"One pass of the lease reaper over {FIRESTORE},\n"
            "as Cloud Scheduler's call does: a RUNNING step whose lease expired is made READY again\n"
            "(while its attempt is below --max-attempts) or FAILED with STEP_LEASE_EXPIRED."
        ),
        exit_codes={
            0: "the pass is done (also when no lease had expired)",
            1: "some lease could not be reaped (named; the next pass tries again)",
            2: USAGE_MEANING,
        },
        run=run_reap,
    )
    reap.add_argument(
        "--max-attempts",
        type=positive_integer,
        metavar="N",
        help="READY again while attempt < N, else FAILED (over env STEP_MAX_ATTEMPTS; default 5)",
    )
    reap.add_argument(
        "--batch",
        type=positive_integer,
        default=200,
        metavar="N",
        help="leases looked at in this pass (default 200)",
    )
    reap.add_argument("--json", action="store_true", help="print one JSON object instead of a sentence")
    add_submit_command(commands)


def run_advance(args: argparse.Namespace) -> int:
    settings = load_settings({"local_output_dir": args.output_dir})
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    if args.flow_run_path is not None:
        return _advance_local(args.flow_run_path, settings.local_output_dir, as_json=args.json)
    if args.output_dir is not None:
        raise UsageError("--output-dir goes with --flow-run-path (run-local's state), not --run-id")
    from worker_chart_export.bootstrap import cli_runtime
    from worker_chart_export.service.advance import advance_version

    problem = document_id_problem(args.run_id)
    if problem is not None:
        raise UsageError(f"--run-id {args.run_id!r}: {problem}")
    with cli_runtime(settings) as runtime:
        store = runtime.advance_store()
        version = store.read_version(args.run_id)
        if version is None:
            raise UsageError(f"flow_runs/{args.run_id} does not exist")
        result = advance_version(args.run_id, version[0], version[1], store)
    if args.json:
        print(json.dumps(result.log_fields()))
    else:
        print(advance_sentence(f"flow_runs/{args.run_id}", result.plan, result.outcome))
    return EXIT_OK


def _advance_local(flow_run_path: Path, output_dir: Path, *, as_json: bool) -> int:
    from worker_chart_export.bootstrap import LocalLayout
    from worker_chart_export.bootstrap.commands import local_flow_runs, read_flow_run
    from worker_chart_export.service.advance import advance_version

    run_id = read_flow_run(flow_run_path)["runId"]
    layout = LocalLayout.under(output_dir, run_id)
    store = local_flow_runs(flow_run_path, layout.flow_run_state)
    version = store.read_version(run_id)
    if version is None:  # the state beside it holds another run
        raise UsageError(f"flow_run state {layout.flow_run_state} holds another run than {run_id}")
    result = advance_version(run_id, version[0], version[1], store)
    plan = result.plan
    if as_json:
        summary = {
            "runId": run_id,
            "readySteps": list(plan.ready_step_ids),
            "runStatus": plan.run_status.value if plan.run_status else None,
            "reason": plan.reason,
            "flowRunStatePath": str(layout.flow_run_state),
        }
        print(json.dumps(summary))
    else:
        print(advance_sentence(f"run {run_id} (state {layout.flow_run_state})", plan, result.outcome))
    return EXIT_OK


def advance_sentence(subject: str, plan: AdvancePlan, outcome: AdvanceEffect) -> str:
    """What advance did, as one sentence for a person."""
    if outcome is AdvanceEffect.UNCHANGED:
        return f"{subject}: nothing to change ({plan.reason})."
    if outcome is AdvanceEffect.STALE:
        return (
            f"{subject} changed while it was being advanced: nothing written (the newer version "
            "is advanced by its own event; run advance again to see it)."
        )
    done = []
    if plan.ready_step_ids:
        done.append(f"{', '.join(plan.ready_step_ids)} made READY")
    if plan.run_status is not None:
        done.append(f"run status set to {plan.run_status.value}")
    error = plan.run_error
    because = f" ({error.get('code')}: {error.get('message')})" if error else ""
    return f"{subject}: {' and '.join(done)}{because}."


def run_reap(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap import cli_runtime
    from worker_chart_export.service.reaper import reap_once

    settings = load_settings({"step_max_attempts": args.max_attempts})
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    with cli_runtime(settings) as runtime:
        reaper = runtime.reaper()
        report = reap_once(
            reaper.leases, clock=reaper.clock, max_attempts=reaper.max_attempts, batch=args.batch
        )
    print(json.dumps(report.to_summary()) if args.json else reap_sentence(report, reaper.max_attempts))
    return EXIT_FAILED if report.errors else EXIT_OK


_LEFT_ALONE = {
    LeaseFate.NOT_EXPIRED: "renewed meanwhile (left alone)",
    LeaseFate.SUPERSEDED: "claimed again meanwhile (left alone)",
    LeaseFate.CLEARED: "stray (the step had finished: lease deleted)",
}


def reap_sentence(report: ReapReport, max_attempts: int) -> str:
    """One reaper pass as one sentence for a person."""
    looked_at = sum(len(ids) for ids in report.outcomes.values()) + len(report.errors)
    if looked_at == 0:
        return "reaper pass: no expired lease, nothing to do."
    parts = []
    if retried := report.outcomes.get(LeaseFate.RETRIED):
        parts.append(f"{len(retried)} step(s) READY again ({', '.join(retried)})")
    if failed := report.outcomes.get(LeaseFate.FAILED):
        parts.append(
            f"{len(failed)} FAILED with STEP_LEASE_EXPIRED after {max_attempts} attempt(s) "
            f"({', '.join(failed)})"
        )
    for outcome, meaning in _LEFT_ALONE.items():
        if count := report.count(outcome):
            parts.append(f"{count} {meaning}")
    if report.errors:
        errors = "; ".join(report.errors)
        parts.append(f"{len(report.errors)} could not be reaped ({errors}): the next pass tries again")
    return f"reaper pass: {looked_at} expired lease(s): {'; '.join(parts)}."
