"""`worker-chart-export stack up`: start the local stack, run one flow_run through it while
showing each step's status live, print where the artifacts are, stop everything.

Exit status: 0 the run SUCCEEDED, 1 it did not (FAILED, CANCELLED, not settled in --timeout,
or the stack could not start), 2 unusable --flow-run, 130 interrupted (Ctrl-C / SIGTERM).
Whatever happens, every process the stack started is stopped by its process group.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from worker_chart_export import bundled
from worker_chart_export.adapters.flow_run_file import read_valid_flow_run
from worker_chart_export.cli.surface import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED_MEANING,
    USAGE_MEANING,
    add_command,
    add_group,
    positive_number,
)
from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.core.run_progress import chart_manifests
from worker_chart_export.tools.devstack.processes import Child, StackError

if TYPE_CHECKING:  # rich and the Firestore client load only when the stack runs
    from rich.console import Console

    from worker_chart_export.tools.devstack.stack import LocalStack
    from worker_chart_export.tools.devstack.watch import RunWatch

EXIT_SUCCEEDED = EXIT_OK
POLL_SECONDS = 0.25
SAMPLE_NAME = "flow_run.sample.json"


def add_stack_command(commands: Any) -> None:
    stack_commands = add_group(
        commands,
        "stack",
        summary="the whole flow on this machine, live: emulators, triggers, the three functions",
        description="The local stack: `stack up` starts it and runs a flow_run through it.",
    )
    up = add_command(
        stack_commands,
        "up",
        summary="start the stack, run a flow_run through it live, then stop everything",
        description=__doc__ or "",
        exit_codes={
            EXIT_SUCCEEDED: "the run SUCCEEDED",
            EXIT_FAILED: "the run did not succeed, or the stack could not start",
            EXIT_USAGE: USAGE_MEANING + " (an unusable --flow-run)",
            EXIT_INTERRUPTED: INTERRUPTED_MEANING + ": the stack is stopped first",
        },
        run=run_stack,
    )
    up.add_argument("--flow-run", type=Path, help=f"flow_run JSON (default: the bundled {SAMPLE_NAME})")
    up.add_argument(
        "--charts-api-mode",
        choices=["mock", "real"],
        default="mock",
        help="mock: recorded answers (default); real: a local CHART-IMG stand-in (source checkout only)",
    )
    up.add_argument(
        "--simulate-other-steps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="complete READY steps no worker here handles (OHLCV_EXPORT, LLM_REPORT...) with a "
        "labelled stand-in so the run can settle (default: on)",
    )
    up.add_argument(
        "--keep-running", action="store_true", help="after the run settles, keep serving until Ctrl-C"
    )
    up.add_argument(
        "--timeout",
        type=positive_number,
        default=300.0,
        help="seconds to wait for the run to settle (default 300)",
    )
    up.add_argument(
        "--output-dir",
        type=Path,
        default=Path("out/stack"),
        help="where artifacts are downloaded (default out/stack)",
    )
    up.add_argument(
        "--lease-seconds",
        type=positive_number,
        default=20.0,
        help="the worker's request timeout = step lease (default 20)",
    )


def run_stack(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
    except ImportError:
        raise UsageError(
            "needs the development extras: run `bash scripts/bootstrap.sh` in a source checkout, "
            "or pip install 'worker-chart-export[dev]'"
        ) from None

    from worker_chart_export.tools.devstack.stack import LocalStack, StackOptions

    console = Console(highlight=False, soft_wrap=True)  # long paths stay on one line
    document = read_valid_flow_run(args.flow_run or bundled.fixtures_dir() / SAMPLE_NAME, "--flow-run")
    options = StackOptions(
        charts_api_mode=args.charts_api_mode,
        request_timeout_seconds=args.lease_seconds,
        finalize_budget_seconds=min(5.0, args.lease_seconds / 4),
    )
    stack = LocalStack(options)
    stack.supervisor.on_start = lambda child: _announce(console, child)
    with _signals_raise_interrupt():
        try:
            console.print(f"logs: {stack.log_dir}")
            began = time.monotonic()
            stack.start()
            _print_endpoints(console, stack)
            console.print(f"stack ready in {time.monotonic() - began:.1f}s", style="dim")
            return _run(console, stack, document, args)
        except StackError as exc:
            console.print(f"[bold red]stack could not start:[/] {exc}")
            return EXIT_FAILED
        except KeyboardInterrupt:
            console.print("interrupted: stopping the stack")
            return EXIT_INTERRUPTED
        finally:
            with _signals_ignored():  # a second Ctrl-C must not leave half the stack running
                began = time.monotonic()
                groups = len(stack.supervisor.children)
                stack.stop()
                console.print(f"stack stopped ({groups} process groups) in {time.monotonic() - began:.1f}s")


def _run(console: Console, stack: LocalStack, document: dict[str, Any], args: argparse.Namespace) -> int:
    from rich.live import Live

    from worker_chart_export.tools.devstack.watch import RunWatch

    run_id = stack.write_flow_run(document)
    watch = RunWatch(stack.flow_run_ref(run_id), simulate_other_steps=args.simulate_other_steps)
    deadline = time.monotonic() + args.timeout
    with Live(watch.table(), console=console, refresh_per_second=4, transient=False) as live:
        while True:
            for change in watch.poll():
                live.console.print(change.text())
            live.update(watch.table())
            if watch.settled or time.monotonic() > deadline:
                break
            time.sleep(POLL_SECONDS)
    console.print()
    status = watch.run_status
    if not watch.settled:
        console.print(
            f"[bold red]run {run_id} did not settle within {args.timeout:.0f}s[/] (status {status})"
        )
    else:
        console.print(f"run {run_id} settled: {status}")
    _print_artifacts(console, stack, watch, args.output_dir)
    if args.keep_running:
        console.print("the stack keeps running (--keep-running): Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)
    return EXIT_SUCCEEDED if status == "SUCCEEDED" else EXIT_FAILED


def _announce(console: Console, child: Child) -> None:
    console.print(f"started {child.name} pid={child.pid} (own process group {child.pid})", style="dim")


def _print_endpoints(console: Console, stack: LocalStack) -> None:
    console.print(
        f"FIRESTORE_EMULATOR_HOST={stack.emulator_host} STORAGE_EMULATOR_HOST={stack.gcs_url} "
        f"GOOGLE_CLOUD_PROJECT={stack.project} bucket gs://{stack.bucket}; triggers via the router "
        f"on 127.0.0.1:{stack.router.port}",
        style="dim",
    )


def _print_artifacts(console: Console, stack: LocalStack, watch: RunWatch, output_dir: Path) -> None:
    for step_id, uri in chart_manifests(watch.document).items():
        if not uri.startswith(f"gs://{stack.bucket}/"):
            continue
        prefix = uri.removeprefix(f"gs://{stack.bucket}/").rsplit("/", 1)[0] + "/"
        try:
            files = stack.download(prefix, output_dir / "gcs")
        except (StackError, OSError) as exc:
            console.print(f"{step_id}: artifacts at {uri}; download failed: {exc}")
            continue
        local = output_dir / "gcs" / stack.bucket / prefix
        pngs = sum(1 for path in files if path.suffix == ".png")
        console.print(f"[bold]{step_id}[/]: {uri} ({pngs} PNGs)")
        console.print(f"  downloaded to {local}")
        console.print(f"  view: worker-chart-export view {local}")
        console.print(
            f"  or, while the stack runs (--keep-running): STORAGE_EMULATOR_HOST={stack.gcs_url} "
            f"worker-chart-export view {uri}"
        )


@contextlib.contextmanager
def _signals_raise_interrupt() -> Iterator[None]:
    """SIGTERM stops the stack as Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
