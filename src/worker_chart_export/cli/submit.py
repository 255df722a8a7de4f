"""`worker-chart-export submit`: put a flow_run into Firestore as a producer does, and with
`--wait` follow it to its end.

The file is checked against contracts/flow_run.schema.json; `--run-id` replaces its runId, so
one file (the bundled sample too) starts as many runs as wanted. The run is created
create-only (an existing runId is refused) with status PENDING (`core.flow.flow_rules.as_new_run`):
advance_flow receives the creation, makes the first steps READY and the run RUNNING, and the
workers take it from there. Nothing else writes.

Output: the runId; with `--wait`, one line per status change until the run is SUCCEEDED,
FAILED or CANCELLED (or `--timeout`), then each CHART_EXPORT step's manifest and the `view`
command that opens it. Exit 0 the run SUCCEEDED (or, without --wait, was created), 1 it did
not, 2 bad input or Firestore unusable (one line).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker_chart_export.command_surface import (
    EXIT_FAILED,
    EXIT_OK,
    USAGE_MEANING,
    add_command,
    command_line,
    positive_number,
)
from worker_chart_export.core.flow.flow_rules import NEW_RUN_STATUS
from worker_chart_export.core.flow.run_progress import chart_manifests, is_finished, status_changes
from worker_chart_export.settings import load_settings

if TYPE_CHECKING:
    pass
    from worker_chart_export.core.documents import FlowRunDocument

DEFAULT_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 0.5
_RPC_SECONDS = 10.0
DESCRIPTION = """\
Creates flow_runs/<runId> in Firestore (the emulator's with FIRESTORE_EMULATOR_HOST, else
GOOGLE_CLOUD_PROJECT's with its credentials) as a producer does. The file is checked against
contracts/flow_run.schema.json; --run-id replaces its runId, so one file starts many runs. The
run is created once (an existing runId is refused), with status PENDING: advance_flow hears the
creation and starts it.

Prints the runId; with --wait, one line per status change until the run is SUCCEEDED, FAILED
or CANCELLED (or --timeout passes), then each chart step's manifest and the command that shows
it as a page. Steps of other types (LLM_REPORT...) need their own workers; on a local stack
(stack up --keep-running) a stand-in completes them."""


def add_submit_command(commands: Any) -> None:
    submit = add_command(
        commands,
        "submit",
        summary="create a flow_run in Firestore (as a producer does) and optionally follow it to its end",
        description=DESCRIPTION,
        exit_codes={
            0: "the run SUCCEEDED (without --wait: it was created)",
            1: "it ended FAILED or CANCELLED, or was still going at --timeout",
            2: USAGE_MEANING + " (an existing runId, Firestore unreachable, no credentials)",
        },
        run=run_submit,
    )
    submit.add_argument(
        "--flow-run-path",
        required=True,
        type=Path,
        metavar="FILE",
        help="flow_run JSON (flow_run.schema.json)",
    )
    submit.add_argument("--run-id", metavar="ID", help="the new run's id (default: the file's runId)")
    submit.add_argument("--wait", action="store_true", help="print each status change until the run ends")
    submit.add_argument(
        "--timeout",
        type=positive_number,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"with --wait: how long to follow the run (default {DEFAULT_TIMEOUT_SECONDS:.0f})",
    )


def run_submit(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap.commands import (
        checked_firestore,
        create_flow_run,
        read_valid_flow_run,
        run_reader,
    )

    document = read_valid_flow_run(args.flow_run_path, run_id=args.run_id)
    run_id = str(document["runId"])
    settings = load_settings()
    with checked_firestore(settings.google_cloud_project, settings.firestore_emulator_host) as client:
        create_flow_run(client, document)
        if document.get("status") != NEW_RUN_STATUS:
            print(
                f"{args.where}: note: {args.flow_run_path} says status {document.get('status')}; "
                f"created {NEW_RUN_STATUS}, as every new run (advance_flow sets the run status)",
                file=sys.stderr,
            )
        print(run_id, flush=True)
        if not args.wait:
            return EXIT_OK
        read = run_reader(client, run_id, timeout=_RPC_SECONDS)
        final = follow(read, args.timeout, _print_line)
    return _report(run_id, final, args.timeout)


def follow(
    read: Callable[[], FlowRunDocument | None],
    timeout: float,
    say: Callable[[str], None],
    *,
    poll_seconds: float = POLL_SECONDS,
) -> FlowRunDocument | None:
    """Read the run every `poll_seconds` until it is finished or `timeout` passed, saying each
    status change; returns the last version read (None if the run was deleted). `read`:
    the run as it is now, None when there is no such document."""
    started = time.monotonic()
    seen: FlowRunDocument | None = None
    while True:
        found = read()
        elapsed = time.monotonic() - started
        for change in status_changes(seen, found):
            say(f"{elapsed:6.1f}s  {change.describe()}  {change.attempt_text}".rstrip())
        seen = found
        if found is None or is_finished(found) or elapsed > timeout:
            return found
        time.sleep(poll_seconds)


def _report(run_id: str, final: FlowRunDocument | None, timeout: float) -> int:
    status = final.get("status") if final is not None else None
    if not final:
        print(f"run {run_id}: the document was deleted")
    elif is_finished(final):
        print(f"run {run_id}: {status}")
    else:
        print(f"run {run_id}: still {status} after {timeout:.0f} s (it goes on; --timeout to wait longer)")
    for step_id, uri in chart_manifests(final).items():
        print(f"{step_id}: {uri}")
        print(f"  view: {command_line('view', uri)}")
    return EXIT_OK if status == "SUCCEEDED" else EXIT_FAILED


def _print_line(text: str) -> None:
    print(text, flush=True)
