"""The `worker-chart-export` command: the parser of every subcommand and `main`, which runs
the one chosen and turns a mistake into one stderr line, `worker-chart-export <command>:
error: ...`, and exit 2. Each subcommand's module registers it (cli/surface.add_command).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.cli.accounts import add_accounts_command
from worker_chart_export.cli.flow import add_flow_commands
from worker_chart_export.cli.output import redacted_output, unwrapped
from worker_chart_export.cli.run_local import add_run_local_command, flags_given
from worker_chart_export.command_surface import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    USAGE_MEANING,
    CommandParser,
    add_command,
    add_group,
    error_line,
    port_number,
)
from worker_chart_export.core.exceptions import ConfigError, UsageError
from worker_chart_export.environment import CHART_IMG_ACCOUNTS_JSON, CHARTS_BUCKET
from worker_chart_export.functions.serve import FUNCTION_TARGET, SIGNATURES
from worker_chart_export.logs import configure_logging, get_logger
from worker_chart_export.settings import Settings, load_settings
from worker_chart_export.tools.view import add_view_command

DESCRIPTION = """\
Renders the CHART_EXPORT steps of flow_runs into PNG charts through the CHART-IMG API, with a
manifest, as the Cloud Run worker does; and everything around it, on this machine or against
Firestore.

Start here:
  stack up      the whole flow on this machine (emulators, triggers, the three functions),
                live, with the bundled sample flow_run; nothing to configure
  run-local     one CHART_EXPORT step of a flow_run JSON file, mock charts by default
  view          one HTML page of a run's charts (a local folder or gs://)

Each command's --help says what it does, its defaults and its exit status.
"""
EPILOG = """\
exit status: 0 done (the step or run SUCCEEDED), 1 it ran and did not succeed, 2 a mistake in
the command or the configuration (one line naming it), 130 interrupted."""


def _add_stack_command(commands: Any) -> None:
    """`stack`, a development tool: in a source checkout's install; a wheel (the image) ships
    without it, and there `stack` says how to get it."""
    try:
        from worker_chart_export.tools.devstack import add_stack_command
    except ImportError:
        stack = add_command(
            commands,
            "stack",
            summary="the whole flow on this machine (a development tool: not in this installation)",
            description="The local stack is a development tool, installed from a source checkout.",
            exit_codes={EXIT_USAGE: "not installed here: how to get it"},
            run=_stack_not_installed,
        )
        stack.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        return
    add_stack_command(commands)


def _stack_not_installed(args: argparse.Namespace) -> int:
    raise UsageError(
        "the local stack is a development tool, not part of this installation: run it from a "
        "source checkout (bash scripts/bootstrap.sh, then .venv/bin/worker-chart-export stack up)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _add_stack_command(commands)
    add_run_local_command(commands)
    add_view_command(commands)
    add_flow_commands(commands)  # advance, reap, submit
    add_accounts_command(commands)
    _add_templates_command(commands)
    _add_serve_command(commands)
    return parser


def _add_serve_command(commands: Any) -> None:
    parser = add_command(
        commands,
        "serve",
        summary="serve one of the functions over HTTP, as Cloud Run does (the worker by default)",
        description=(
            "Serves a function of worker_chart_export.functions.main with functions-framework\n"
            "(gunicorn), as the container image does: on_flow_run_updated (the worker, CloudEvents),\n"
            "advance_flow (CloudEvents) or reap_expired_leases (HTTP POST). Runs until stopped.\n"
            "The worker's configuration (accounts, bucket, mode) is checked before anything is served."
        ),
        exit_codes={0: "stopped (SIGTERM or Ctrl-C)", 2: USAGE_MEANING + " (a port in use included)"},
        run=serve,
    )
    parser.add_argument(
        "--port", type=port_number, help="the port to listen on (over env PORT; default 8080)"
    )
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--target",
        choices=sorted(SIGNATURES),
        default=os.environ.get("FUNCTION_TARGET") or FUNCTION_TARGET,
        help=f"the function to serve (over env FUNCTION_TARGET; default {FUNCTION_TARGET})",
    )


def _add_templates_command(commands: Any) -> None:
    template_commands = add_group(
        commands,
        "templates",
        summary="chart templates: templates sync checks them and loads them into Firestore",
        description="Chart template commands.",
    )
    sync = add_command(
        template_commands,
        "sync",
        summary="validate chart-templates/*.json and upsert them into Firestore chart_templates/{id}",
        description=(
            "Validates every template file (the schema, the CHART_IMG_PLAN rules, CHART-IMG's\n"
            "documented lists), then writes the ones that differ into Firestore chart_templates/\n"
            "(the emulator's with FIRESTORE_EMULATOR_HOST): all or nothing. --dry-run only validates."
        ),
        exit_codes={
            0: "every template is valid (and, without --dry-run, stored)",
            1: "some template is invalid: the report names file and field; nothing was written",
            2: USAGE_MEANING + " (Firestore unreachable or no credentials included)",
        },
        run=templates_sync,
    )
    sync.add_argument(
        "--dir",
        type=Path,
        help="templates folder (over env CHART_TEMPLATES_DIR; default the bundled chart-templates/)",
    )
    sync.add_argument(
        "--dry-run",
        action="store_true",
        help="only validate, offline: no credentials needed, Firestore is not contacted",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a mistake: one line, exit 2
    if args.command in _NOT_REDACTED:
        return _run(args)
    with redacted_output():  # what the command prints: no form of a key (cli/output.py)
        return _run(args)


# stack prints a live view of statuses. serve is redacted like the rest: not only logs.py's
# lines leave through its streams, but gunicorn's, Flask's, a library's warning or traceback
_NOT_REDACTED = frozenset({"stack"})


def _run(args: argparse.Namespace) -> int:
    where = str(args.where)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(error_line(where, str(exc)), file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        # name what the user actually set: the flag when one supplied the setting, else the variable
        label = flags_given(args).get(exc.setting) if args.command == "run-local" else None
        print(error_line(where, exc.render(label)), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # execute_step has already recorded the step FAILED if it had claimed one
        print(f"{where}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def serve(args: argparse.Namespace) -> int:
    from worker_chart_export.functions.serve import listen_problem, run_server

    settings = load_settings()
    # logs.py redacts its lines itself; gunicorn's, Flask's and the rest pass the wrapped streams
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=unwrapped(sys.stdout))
    port = args.port if args.port is not None else settings.port
    # the port first: a local check, before the bucket's round trips
    problem = listen_problem(args.host, port)
    if problem is not None:  # gunicorn would retry for 5 s, then exit 1 with ten lines
        raise UsageError(problem)
    # a ConfigError stops here (exit 2, nothing served), naming the environment variable
    summary = _served_configuration(settings) if args.target == FUNCTION_TARGET else {}
    get_logger().info("serving the function", target=args.target, port=port, **summary)
    if args.target == FUNCTION_TARGET:
        _schedule_warm_up()
    run_server(port, host=args.host, target=args.target)
    return EXIT_OK


# What serve says when the worker's start-up check fails for want of a setting: in serve's own
# terms (it has no --accounts-config-path; a bucket the user never set is named as not set).
SERVE_NO_ACCOUNTS = (
    "no CHART-IMG accounts configured: set CHART_IMG_ACCOUNTS_JSON (the accounts' JSON) or "
    "CHART_IMG_ACCOUNTS_SECRET (a Secret Manager secret holding it), or serve with CHARTS_API_MODE=mock "
    "(no CHART-IMG call)"
)
SERVE_NO_BUCKET = (
    "not set, and serve stores the charts in a bucket it checks before it listens: set CHARTS_BUCKET to "
    "one you can write (with Application Default Credentials, or STORAGE_EMULATOR_HOST for an emulator); "
    "run-local and stack up need no bucket"
)


def _served_configuration(settings: Settings) -> dict[str, object]:
    """The worker's start-up check (bootstrap.check_configuration), its refusal for a setting
    the user never gave said as serve sees it."""
    from worker_chart_export.bootstrap import check_configuration

    try:
        return check_configuration(settings)
    except ConfigError as exc:
        if exc.setting == CHARTS_BUCKET and not settings.charts_bucket_configured:
            raise ConfigError(CHARTS_BUCKET, SERVE_NO_BUCKET) from None
        if exc.setting == CHART_IMG_ACCOUNTS_JSON and not _accounts_given(settings):
            raise ConfigError(CHART_IMG_ACCOUNTS_JSON, SERVE_NO_ACCOUNTS) from None
        raise


def _accounts_given(settings: Settings) -> bool:
    """Whether either source of the worker's accounts is set (a blank JSON counts as unset)."""
    given = settings.chart_img_accounts_json
    return bool(given is not None and given.get_secret_value().strip()) or bool(
        settings.chart_img_accounts_secret
    )


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
    directory = args.dir or settings.chart_templates_dir
    if not directory.is_dir():
        given = "--dir" if args.dir else "CHART_TEMPLATES_DIR"
        raise UsageError(f"{given} {directory}: not a folder (the chart templates' folder)")
    code, text = run_templates_sync(
        directory,
        settings.google_cloud_project,
        args.dry_run,
        emulator_host=settings.firestore_emulator_host,
        plans=template_plans(settings, offline=args.dry_run),
    )
    print(text)
    return code
