"""`worker-chart-export run-local`: one CHART_EXPORT step of a flow_run JSON file, on this
machine, through the same execute_step as the CloudEvent function.

The claim and the finalize go to `<output-dir>/flow_runs/<runId>.json` (the input file is
never modified): a second run finds no READY step and is a no-op, whose line says how to run
the step again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.cli.accounts import read_accounts_file
from worker_chart_export.command_surface import (
    EXIT_FAILED,
    EXIT_OK,
    INTERRUPTED_MEANING,
    USAGE_MEANING,
    add_command,
    command_line,
    error_line,
)
from worker_chart_export.core.exceptions import RedeliverEvent, StepSelectionError, UsageError
from worker_chart_export.core.step.step_rules import steps_of
from worker_chart_export.core.step.step_types import handles
from worker_chart_export.core.types import StepStatus
from worker_chart_export.environment import (
    CHART_IMG_ACCOUNTS_JSON,
    CHARTS_API_MODE,
    CHARTS_BUCKET,
    CHARTS_LOCAL_OUTPUT_DIR,
)
from worker_chart_export.logs import configure_logging, get_logger
from worker_chart_export.settings import RunLocalSettings, Settings, load_settings

if TYPE_CHECKING:
    from worker_chart_export.bootstrap import LocalLayout
    from worker_chart_export.core.documents import FlowRunDocument
    from worker_chart_export.service.execute import StepReport

DESCRIPTION = """\
Runs one CHART_EXPORT step of a flow_run JSON file on this machine, through the same code as
the Cloud Run worker: by default the first READY one, with recorded CHART-IMG answers (mock
mode: no network, no account). The PNGs and the manifest go under <output-dir>/gcs/<bucket>/,
the bucket's layout, unless --charts-bucket names a bucket. Logs (JSON lines) go to stderr.

The claim and the result go to <output-dir>/flow_runs/<runId>.json; the input file is never
modified. A second run finds no READY step there and does nothing: its line says how to run
the step again."""


def add_run_local_command(commands: Any) -> None:
    run = add_command(
        commands,
        "run-local",
        summary="run one CHART_EXPORT step of a flow_run JSON file on this machine (mock charts by default)",
        description=DESCRIPTION,
        exit_codes={
            0: "the step SUCCEEDED",
            1: "it FAILED, or no step was READY (the line says why and how to run it again)",
            2: USAGE_MEANING,
            130: f"{INTERRUPTED_MEANING}; a step it had claimed is recorded FAILED first",
        },
        run=run_local,
    )
    run.add_argument(
        "--flow-run-path",
        required=True,
        type=Path,
        metavar="FILE",
        help="flow_run JSON (flow_run.schema.json)",
    )
    run.add_argument(
        "--step-id", metavar="ID", help="run this CHART_EXPORT step (default: the first READY one)"
    )
    run.add_argument(
        "--charts-api-mode",
        choices=["real", "mock", "record"],
        help="mock: recorded answers, no network; real: CHART-IMG; record: a recorded answer, "
        "else CHART-IMG's saved (over env CHARTS_API_MODE; default mock)",
    )
    run.add_argument(
        "--charts-bucket",
        metavar="gs://BUCKET",
        help="write to this GCS bucket instead of the local folder (over env CHARTS_BUCKET; "
        "default: none, the local mirror <output-dir>/gcs/)",
    )
    run.add_argument(
        "--accounts-config-path",
        type=Path,
        metavar="FILE",
        help="CHART-IMG accounts JSON, as CHART_IMG_ACCOUNTS_JSON (over it and "
        "CHART_IMG_ACCOUNTS_SECRET; default: none, which mock mode does not need)",
    )
    run.add_argument(
        "--output-summary",
        choices=["none", "text", "json"],
        default="text",
        help="what stdout gets (default text; logs go to stderr)",
    )
    run.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="local output folder (over env CHARTS_LOCAL_OUTPUT_DIR; default ./out)",
    )


def flags_given(args: argparse.Namespace) -> dict[str, str]:
    """The flags given, by the environment variable they stand in for, as an error message
    should name them."""
    labels: dict[str, str] = {}
    if args.accounts_config_path is not None:
        # the file's content stands in for the variable: name the file
        labels[CHART_IMG_ACCOUNTS_JSON] = f"--accounts-config-path {args.accounts_config_path}"
    for var, flag, value in (
        (CHARTS_API_MODE, "--charts-api-mode", args.charts_api_mode),
        (CHARTS_BUCKET, "--charts-bucket", args.charts_bucket),
        (CHARTS_LOCAL_OUTPUT_DIR, "--output-dir", args.output_dir),
    ):
        if value is not None:
            labels[var] = f"{flag} (over {var})"
    return labels


def run_local(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap import LocalLayout, local_step
    from worker_chart_export.bootstrap.commands import check_accounts_json, read_valid_flow_run
    from worker_chart_export.service.local_run import choose_local_step, execute_chosen_step

    settings = _settings(args)
    # Logs go to stderr so that stdout carries only the summary (parseable with --output-summary=json).
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    log = get_logger()
    # the file, read once and checked as submit checks it: a mistake stops here, nothing written
    original = read_valid_flow_run(args.flow_run_path)
    check_accounts_json(settings.chart_img_accounts_json)  # mock mode uses none, yet a bad file is a mistake
    run_id = original["runId"]
    layout = LocalLayout.under(settings.local_output_dir, run_id)
    flow_runs, step = local_step(settings, args.flow_run_path, layout)
    flow_run = _current_state(flow_runs.read, layout, original)

    try:
        choice = choose_local_step(flow_run, args.step_id)
    except StepSelectionError as exc:
        raise UsageError(f"--step-id: {exc}") from None
    try:
        layout.flow_run_state.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output-dir {layout.output_dir}: cannot be used ({exc.strerror})") from None
    # every mistake was found by now: a run that logs has begun
    log.info(
        "run-local started",
        mode="local",
        chartsApi={"mode": settings.charts_api_mode.value},
        flowRunPath=str(args.flow_run_path),
        stepId=args.step_id,
    )
    log.info("flow_run parsed", runId=run_id, flowKey=flow_run.get("flowKey"))
    try:
        report = execute_chosen_step(
            choice,
            ports=step.ports,
            limits=step.limits,
            clock=step.clock,
            # a step a bad window holds back waits here, then runs again (the reaper's part)
            take_back=lambda run, step_id, now: flow_runs.take_back(
                run, step_id, now=now, max_attempts=settings.step_max_attempts
            ),
        )
    except RedeliverEvent as exc:
        print(error_line(args.where, str(exc)), file=sys.stderr)
        return EXIT_FAILED
    if report.outcome == "NOOP":
        report = replace(report, message=report.message + _how_to_go_on(original, args, layout))
    _print_summary(args.output_summary, report, layout, settings.charts_bucket_configured)
    return EXIT_OK if report.outcome == "SUCCEEDED" else EXIT_FAILED


def _settings(args: argparse.Namespace) -> Settings:
    """Flags win over the environment, which wins over the defaults (mock mode here)."""
    return load_settings(
        {
            "charts_api_mode": args.charts_api_mode,
            "charts_bucket": args.charts_bucket,
            "chart_img_accounts_json": read_accounts_file(args.accounts_config_path),
            "local_output_dir": args.output_dir,
        },
        kind=RunLocalSettings,
    )


def _current_state(
    read_state: Callable[[], FlowRunDocument], layout: LocalLayout, original: FlowRunDocument
) -> FlowRunDocument:
    """The state beside the sample once a run has written it, else the file as read."""
    try:
        return read_state() if layout.flow_run_state.exists() else original
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"flow_run state {layout.flow_run_state} is unreadable ({exc}); delete it to start the run over"
        ) from None


def _how_to_go_on(original: FlowRunDocument, args: argparse.Namespace, layout: LocalLayout) -> str:
    """After NOOP: the state is what has no READY step once a run wrote it (deleting it starts
    over from the file); a file of PENDING steps waits for advance_flow."""
    if layout.flow_run_state.exists():
        return (
            f" state {layout.flow_run_state} (a step that ran is not run again): to run it again, "
            f"delete that file or give another --output-dir"
        )
    if _has_pending_chart_step(original):
        output = ["--output-dir", str(args.output_dir)] if args.output_dir is not None else []
        advance = command_line("advance", "--flow-run-path", str(args.flow_run_path), *output)
        return f" {args.flow_run_path}: its steps become READY when advance_flow runs ({advance})"
    return ""


def _has_pending_chart_step(flow_run: FlowRunDocument) -> bool:
    return any(
        isinstance(step, Mapping) and handles(step) and step.get("status") == StepStatus.PENDING
        for step in steps_of(flow_run).values()
    )


def _print_summary(kind: str, report: StepReport, layout: LocalLayout, bucket_configured: bool) -> None:
    local_copy = None if bucket_configured or not report.manifest_uri else str(layout.bucket_root)
    if kind == "json":
        summary = {
            **report.to_summary(),
            "localArtifactsDir": local_copy,
            "flowRunStatePath": str(layout.flow_run_state),
        }
        print(json.dumps(summary))
    elif kind == "text":
        if report.outcome == "NOOP":
            print(f"CHART_EXPORT NOOP: {report.message} ({report.error_code})")
        else:
            line = (
                f"CHART_EXPORT {report.outcome}: manifest={report.manifest_uri or '-'}, "
                f"items={report.items_count}, failures={report.failures_count}, "
                f"minImages={'-' if report.min_images is None else report.min_images}"
            )
            if report.error_code:
                line += f", error={report.error_code}: {report.message}"
            print(line)
        if local_copy and report.manifest_uri:
            print(f"artifacts written locally under {local_copy}/ (mirrors the bucket layout)")
            folder = layout.bucket_root / report.manifest_uri.removeprefix("gs://").rsplit("/", 1)[0]
            print(f"look at them: {command_line('view', str(folder))}")
        if layout.flow_run_state.exists():
            print(f"flow_run state: {layout.flow_run_state}")
