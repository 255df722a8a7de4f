"""`worker-chart-export advance`, `reap` and `submit`: advance_flow, the reaper and a
producer from a shell.

`advance --run-id ID` runs advance_flow on a Firestore flow_run (the emulator's with
FIRESTORE_EMULATOR_HOST), as its CloudEvent function would on that version;
`advance --flow-run-path FILE` runs it on run-local's state of a local flow_run.
`reap` runs one reaper pass over Firestore, as Cloud Scheduler's call does.
`submit` creates a flow_run and follows it (submit.py).
`advance` and `reap` take their parts from bootstrap's Runtime around a checked Firestore
client (`cli_runtime`): a failure is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.cli.submit import add_submit_command
from worker_chart_export.core.document_ids import document_id_problem
from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.logs import configure_logging
from worker_chart_export.settings import load_settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_flow_commands(commands: Any) -> None:
    advance = commands.add_parser("advance", help="advance_flow: make steps READY, set the run status")
    where = advance.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-id", help="a flow_runs/{runId} document in Firestore")
    where.add_argument("--flow-run-path", type=Path, help="a local flow_run JSON (run-local's state)")
    advance.add_argument("--output-dir", type=Path, help="run-local's output folder (default ./out)")
    reap = commands.add_parser("reap", help="one reaper pass: take back steps whose lease expired")
    reap.add_argument("--max-attempts", type=int, help="over env REAPER_MAX_ATTEMPTS; default 3")
    reap.add_argument("--batch", type=int, default=200, help="leases looked at in this pass")
    add_submit_command(commands)


def run_advance(args: argparse.Namespace) -> int:
    settings = load_settings({"local_output_dir": args.output_dir})
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    if args.flow_run_path is not None:
        return _advance_local(args.flow_run_path, settings.local_output_dir)
    from worker_chart_export.bootstrap import cli_runtime
    from worker_chart_export.service.advance import advance_version

    problem = document_id_problem(args.run_id)
    if problem is not None:
        raise UsageError(f"--run-id {args.run_id!r}: {problem}")
    with cli_runtime(settings) as runtime:
        store = runtime.advance_store()
        version = store.read_version(args.run_id)
        if version is None:
            print(f"worker-chart-export: flow_runs/{args.run_id} does not exist", file=sys.stderr)
            return EXIT_FAILED
        result = advance_version(args.run_id, version[0], version[1], store)
    print(json.dumps(result.log_fields()))
    return EXIT_OK


def _advance_local(flow_run_path: Path, output_dir: Path) -> int:
    from worker_chart_export.adapters.flow_run_file import read_flow_run
    from worker_chart_export.adapters.local import LocalFlowRunStore
    from worker_chart_export.bootstrap import LocalLayout

    run_id = read_flow_run(flow_run_path)["runId"]
    layout = LocalLayout.under(output_dir, run_id)
    plan = LocalFlowRunStore(flow_run_path, layout.flow_run_state).advance()
    summary = {
        "runId": run_id,
        "readySteps": list(plan.ready_step_ids),
        "runStatus": plan.run_status.value if plan.run_status else None,
        "reason": plan.reason,
        "flowRunStatePath": str(layout.flow_run_state),
    }
    print(json.dumps(summary))
    return EXIT_OK


def run_reap(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap import cli_runtime
    from worker_chart_export.service.reaper import reap_once

    settings = load_settings({"reaper_max_attempts": args.max_attempts})
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    with cli_runtime(settings) as runtime:
        reaper = runtime.reaper()
        report = reap_once(
            reaper.leases, clock=reaper.clock, max_attempts=reaper.max_attempts, batch=args.batch
        )
    print(json.dumps(report.to_summary()))
    return EXIT_FAILED if report.errors else EXIT_OK
