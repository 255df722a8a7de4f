"""`worker-chart-export`: run-local, serve, templates sync, view, advance, reap, submit, accounts,
stack. Parses flags, wires adapters, calls the same execute_step as the CloudEvent function,
prints summaries; every error is one line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from worker_chart_export import SERVICE_NAME
from worker_chart_export.adapters.flow_run_file import read_flow_run
from worker_chart_export.cli.accounts import add_accounts_command, read_accounts_file, run_accounts
from worker_chart_export.cli.flow import add_flow_commands, run_advance, run_reap
from worker_chart_export.cli.output import redacted_output
from worker_chart_export.cli.submit import run_submit
from worker_chart_export.core.exceptions import ConfigError, RedeliverEvent, StepSelectionError, UsageError
from worker_chart_export.core.selection import choose_step
from worker_chart_export.environment import (
    CHART_IMG_ACCOUNTS_JSON,
    CHARTS_API_MODE,
    CHARTS_BUCKET,
    CHARTS_LOCAL_OUTPUT_DIR,
)
from worker_chart_export.functions.serve import FUNCTION_TARGET, SIGNATURES
from worker_chart_export.logs import configure_logging, get_logger
from worker_chart_export.settings import RunLocalSettings, load_settings
from worker_chart_export.tools.devstack import add_stack_command, run_stack
from worker_chart_export.tools.view import add_view_arguments, run_view

if TYPE_CHECKING:
    from worker_chart_export.bootstrap import LocalLayout
    from worker_chart_export.service.execute import StepReport

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="worker-chart-export", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run-local", help="run one CHART_EXPORT step of a local flow_run JSON file")
    run.add_argument("--flow-run-path", required=True, type=Path, help="flow_run JSON (flow_run.schema.json)")
    run.add_argument("--step-id", help="run this CHART_EXPORT step instead of the first READY one")
    run.add_argument(
        "--charts-api-mode", choices=["real", "mock", "record"], help="over env CHARTS_API_MODE; default mock"
    )
    run.add_argument(
        "--charts-bucket",
        help="gs://bucket (over env CHARTS_BUCKET); when set, "
        "artifacts go to GCS instead of the local folder",
    )
    run.add_argument(
        "--accounts-config-path",
        type=Path,
        help="CHART-IMG accounts JSON file, same format as CHART_IMG_ACCOUNTS_JSON",
    )
    run.add_argument("--output-summary", choices=["none", "text", "json"], default="text")
    run.add_argument(
        "--output-dir",
        type=Path,
        help="local output folder (over env CHARTS_LOCAL_OUTPUT_DIR; default ./out)",
    )

    serve = commands.add_parser("serve", help="serve the CloudEvent function over HTTP")
    serve.add_argument("--port", type=int, help="default $PORT or 8080")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument(
        "--target",
        choices=sorted(SIGNATURES),
        default=os.environ.get("FUNCTION_TARGET") or FUNCTION_TARGET,
        help="the function to serve (over env FUNCTION_TARGET; default the worker)",
    )

    templates = commands.add_parser("templates", help="chart template commands")
    template_commands = templates.add_subparsers(dest="templates_command", required=True)
    sync = template_commands.add_parser(
        "sync", help="validate chart-templates/*.json and upsert them into Firestore chart_templates/{id}"
    )
    sync.add_argument(
        "--dir",
        type=Path,
        help="templates folder (default: CHART_TEMPLATES_DIR, else the bundled chart-templates/)",
    )
    sync.add_argument(
        "--dry-run",
        action="store_true",
        help="only validate, offline: no credentials needed, Firestore is not contacted",
    )

    view = commands.add_parser("view", help="render a run's manifest as one HTML page")
    add_view_arguments(view)
    add_flow_commands(commands)
    add_stack_command(commands)
    add_accounts_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 on bad flags
    if args.command in _NOT_REDACTED:
        return _run(args)
    with redacted_output():  # what the command prints: no form of a key (cli/output.py)
        return _run(args)


# serve prints log lines only (logs.py redacts them) and stack a live view of statuses
_NOT_REDACTED = frozenset({"serve", "stack"})


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "run-local":
            return run_local(args)
        if args.command == "serve":
            return serve(args)
        if args.command == "view":
            return run_view(args)
        if args.command == "advance":
            return run_advance(args)
        if args.command == "reap":
            return run_reap(args)
        if args.command == "submit":
            return run_submit(args)
        if args.command == "stack":
            return run_stack(args)
        if args.command == "accounts":
            return run_accounts(args)
        return templates_sync(args)
    except UsageError as exc:
        print(f"worker-chart-export: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        # name what the user actually set: the flag when one supplied the setting, else the variable
        label = _flags_given(args).get(exc.setting)
        print(f"worker-chart-export: error: {exc.render(label)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # execute_step has already recorded the step FAILED if it had claimed one
        print("worker-chart-export: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _flags_given(args: argparse.Namespace) -> dict[str, str]:
    """The run-local flags given, by the environment variable they stand in for, as an
    error message should name them."""
    if args.command != "run-local":
        return {}  # serve and templates take their settings from the environment only
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
    from worker_chart_export.service.execute import StepReport, execute_step

    settings = load_settings(
        {
            "charts_api_mode": args.charts_api_mode,
            "charts_bucket": args.charts_bucket,
            "chart_img_accounts_json": read_accounts_file(args.accounts_config_path),
            "local_output_dir": args.output_dir,
        },
        kind=RunLocalSettings,  # mock mode unless the environment or a flag says otherwise
    )
    # Logs go to stderr so that stdout carries only the summary (parseable with --output-summary=json).
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    log = get_logger()
    run_id = read_flow_run(args.flow_run_path)["runId"]
    layout = LocalLayout.under(settings.local_output_dir, run_id)
    log.info(
        "run-local started",
        mode="local",
        chartsApi={"mode": settings.charts_api_mode.value},
        flowRunPath=str(args.flow_run_path),
        stepId=args.step_id,
    )
    try:
        layout.flow_run_state.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output-dir {layout.output_dir}: cannot be used ({exc.strerror})") from None
    flow_runs, step = local_step(settings, args.flow_run_path, layout)
    try:
        flow_run = flow_runs.read()  # the state beside the sample once a run has written it
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"flow_run state {layout.flow_run_state} is unreadable ({exc}); delete it to start the run over"
        ) from None
    log.info("flow_run parsed", runId=run_id, flowKey=flow_run.get("flowKey"))
    try:
        step_id = choose_step(flow_run, args.step_id)
    except StepSelectionError as exc:
        raise UsageError(f"--step-id: {exc}") from None

    if step_id is None:
        log.info("no READY CHART_EXPORT step: no-op", runId=run_id, code="NO_READY_STEP")
        report = StepReport(
            run_id,
            "",
            "NOOP",
            settings.charts_api_mode.value,
            error_code="NO_READY_STEP",
            message="no READY CHART_EXPORT step in the flow_run",
        )
    else:
        try:
            report = execute_step(run_id, step_id, ports=step.ports, limits=step.limits, clock=step.clock)
        except RedeliverEvent as exc:
            print(f"worker-chart-export: {exc}", file=sys.stderr)
            return EXIT_FAILED
    _print_summary(args.output_summary, report, layout, settings.charts_bucket_configured)
    return EXIT_SUCCEEDED if report.outcome == "SUCCEEDED" else EXIT_FAILED


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
        if local_copy:
            print(f"artifacts written locally under {local_copy}/ (mirrors the bucket layout)")
        if layout.flow_run_state.exists():
            print(f"flow_run state: {layout.flow_run_state}")


def serve(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap import check_configuration
    from worker_chart_export.functions.serve import run_server

    settings = load_settings()
    configure_logging(service=SERVICE_NAME, env=settings.env)
    # a ConfigError stops here (exit 2, nothing served), naming the environment variable
    summary = check_configuration(settings) if args.target == FUNCTION_TARGET else {}
    port = args.port if args.port is not None else settings.port
    get_logger().info("serving the function", target=args.target, port=port, **summary)
    if args.target == FUNCTION_TARGET:
        _schedule_warm_up()
    run_server(port, host=args.host, target=args.target)
    return EXIT_SUCCEEDED


def _schedule_warm_up() -> None:
    """Warm the instance in the process that will serve events, once it is listening.

    Under gunicorn (functions-framework's server on Linux) that is the worker the arbiter
    forks after binding the socket: gRPC channels do not survive a fork, so the warm-up
    starts in the child (`os.register_at_fork`), in a background thread, while requests are
    already accepted. Without gunicorn (Flask's server) nothing forks: start it now.
    """
    import importlib.util
    import os
    import threading

    from worker_chart_export.bootstrap import warm_up

    parent = os.getpid()
    started = threading.Event()

    def start() -> None:
        if os.getpid() != parent and not started.is_set():
            started.set()  # once per process, whatever else forks it
            threading.Thread(target=warm_up, name="warm-up", daemon=True).start()

    if importlib.util.find_spec("gunicorn") is not None:
        os.register_at_fork(after_in_child=start)
    else:
        parent = -1
        start()


def templates_sync(args: argparse.Namespace) -> int:
    from worker_chart_export.bootstrap import template_plans
    from worker_chart_export.tools.templates_sync import run_templates_sync

    settings = load_settings()
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    code, text = run_templates_sync(
        args.dir or settings.chart_templates_dir,
        settings.google_cloud_project,
        args.dry_run,
        emulator_host=settings.firestore_emulator_host,
        plans=template_plans(settings, offline=args.dry_run),
    )
    print(text)
    return code
