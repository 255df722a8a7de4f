"""`worker-chart-export stack up`: start the local stack, run one flow_run through it while
showing each step's status live, print where the artifacts are, stop everything.

Whatever happens, every process the stack started is stopped by its process group: at the
end of the run, on a failure to start, and on Ctrl-C or SIGTERM at any moment, start-up
included (the first signal stops the stack; later ones are ignored until it is stopped).
Its logs go to <output-dir>/logs/, one file per process, replaced by the next `stack up`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from worker_chart_export import bundled
from worker_chart_export.command_surface import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED_MEANING,
    USAGE_MEANING,
    add_command,
    add_group,
    command_line,
    error_line,
    positive_number,
)
from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.core.flow.run_progress import chart_manifests
from worker_chart_export.tools.devstack.processes import Child, StackError

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument

if TYPE_CHECKING:  # rich and the Firestore client load only when the stack runs
    from rich.console import Console

    from worker_chart_export.tools.devstack.stack import LocalStack
    from worker_chart_export.tools.devstack.watch import RunWatch

POLL_SECONDS = 0.25
SAMPLE_NAME = "flow_run.sample.json"
DEFAULT_OUTPUT_DIR = Path("out") / "stack"
# --charts-api-mode: the worker's mode each value runs. `stand-in` is the worker's real mode
# against the local CHART-IMG stand-in (never CHART-IMG itself); `real` is its older spelling,
# kept working with a note.
STACK_MODES = {"mock": "mock", "stand-in": "real"}
OLD_STAND_IN_SPELLING = "real"
OLD_SPELLING_NOTE = (
    "note: --charts-api-mode real is the old spelling of --charts-api-mode stand-in: the worker runs in "
    "real mode against the local CHART-IMG stand-in, never CHART-IMG itself"
)
DESCRIPTION = """\
Starts the Firestore emulator with real triggers, fake-gcs-server, the worker, advance_flow
and the reaper (each served in its own process, as on Cloud Run), creates the flow_run as a
producer does, shows each step's status live until the run settles, downloads the charts to
<output-dir>/gcs/, then stops everything. Needs Java and the Google Cloud CLI component
cloud-firestore-emulator; nothing to configure. Details: docs/stack.md.

Every process the stack starts is stopped by its process group at the end, on a failure,
and on Ctrl-C or SIGTERM at any moment (start-up included). Logs: <output-dir>/logs/."""


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
        description=DESCRIPTION,
        exit_codes={
            EXIT_OK: "the run SUCCEEDED",
            EXIT_FAILED: "it FAILED or was CANCELLED, or did not settle within --timeout",
            EXIT_USAGE: USAGE_MEANING + " (an unusable --flow-run; the stack could not start)",
            EXIT_INTERRUPTED: INTERRUPTED_MEANING + ": the stack is stopped first",
        },
        run=run_stack,
    )
    _add_up_flags(up)


def _add_up_flags(up: argparse.ArgumentParser) -> None:
    up.add_argument(
        "--flow-run",
        type=Path,
        metavar="FILE",
        help=f"flow_run JSON to run (default: the bundled {SAMPLE_NAME})",
    )
    up.add_argument(
        "--charts-api-mode",
        choices=[*STACK_MODES, OLD_STAND_IN_SPELLING],
        default="mock",
        help="mock: recorded answers; stand-in: the worker's real mode against the local CHART-IMG "
        "stand-in (tests/harness/chart_img_server.py, never CHART-IMG itself), from a source checkout "
        "only; real: the old spelling of stand-in (default mock)",
    )
    up.add_argument(
        "--simulate-other-steps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="complete READY steps no worker here handles (OHLCV_EXPORT, LLM_REPORT...) with a "
        "labelled stand-in so runs can settle (default: on)",
    )
    up.add_argument(
        "--keep-running",
        action="store_true",
        help="after the run settles, keep serving (for submit, view gs://...) until Ctrl-C",
    )
    up.add_argument(
        "--timeout",
        type=positive_number,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the run to settle (default 300)",
    )
    up.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        metavar="DIR",
        help=f"where the charts are downloaded and the logs written (default {DEFAULT_OUTPUT_DIR})",
    )
    up.add_argument(
        "--lease-seconds",
        type=positive_number,
        default=20.0,
        metavar="SECONDS",
        help="the worker's request timeout, which is a step's lease (default 20)",
    )


def run_stack(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
    except ImportError:
        from worker_chart_export.tools.devstack.services import DEV_EXTRAS_HINT

        raise UsageError(f"needs the development extras: {DEV_EXTRAS_HINT}") from None

    from worker_chart_export.bootstrap.commands import read_valid_flow_run
    from worker_chart_export.tools.devstack.stack import LocalStack, StackOptions

    if args.charts_api_mode == OLD_STAND_IN_SPELLING:
        print(f"{args.where}: {OLD_SPELLING_NOTE}", file=sys.stderr)
    document = read_valid_flow_run(args.flow_run or bundled.fixtures_dir() / SAMPLE_NAME, "--flow-run")
    log_dir = _fresh_log_dir(args.output_dir / "logs")
    options = StackOptions(
        charts_api_mode=STACK_MODES.get(args.charts_api_mode, "real"),
        request_timeout_seconds=args.lease_seconds,
        finalize_budget_seconds=min(5.0, args.lease_seconds / 4),
        log_dir=log_dir,
    )
    console = Console(highlight=False, soft_wrap=True)  # long paths stay on one line
    with _first_signal_interrupts() as interrupted:
        stack = LocalStack(options)
        stack.supervisor.on_start = lambda child: _announce(console, child)
        try:
            console.print(f"logs: {log_dir}/")
            began = time.monotonic()
            stack.start()
            _print_endpoints(console, stack)
            console.print(f"stack ready in {time.monotonic() - began:.1f}s", style="dim")
            return _run(console, stack, document, args)
        except StackError as exc:
            print(error_line(args.where, f"the stack could not start: {exc}"), file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            console.print("interrupted: stopping the stack")
            return EXIT_INTERRUPTED
        finally:
            interrupted.stopping = True  # from here on a signal only notes its moment
            stopping = time.monotonic()
            groups = stack.stop()
            console.print(f"stack stopped ({groups} process groups) in {interrupted.took(stopping)}")


def _fresh_log_dir(path: Path) -> Path:
    """The logs folder, emptied of the previous stack's logs."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*.log"):
            old.unlink()
    except OSError as exc:
        raise UsageError(f"--output-dir: {path} cannot be used ({exc.strerror or exc})") from None
    return path


def _run(console: Console, stack: LocalStack, document: FlowRunDocument, args: argparse.Namespace) -> int:
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
    _print_artifacts(console, stack, watch, args)
    if args.keep_running:
        _keep_running(console, stack, simulate=args.simulate_other_steps)
    return EXIT_OK if status == "SUCCEEDED" else EXIT_FAILED


def _keep_running(console: Console, stack: LocalStack, *, simulate: bool) -> None:
    """Serve until Ctrl-C; the stand-in completes other steps of every run meanwhile."""
    from worker_chart_export.tools.devstack.watch import complete_other_step

    console.print("the stack keeps running (--keep-running): Ctrl-C stops it. In another shell:")
    console.print(
        f"  export FIRESTORE_EMULATOR_HOST={stack.emulator_host} STORAGE_EMULATOR_HOST={stack.gcs_url} "
        f"GOOGLE_CLOUD_PROJECT={stack.project}"
    )
    sample = bundled.fixtures_dir() / SAMPLE_NAME
    console.print(
        f"  {command_line('submit', '--flow-run-path', _shown(sample), '--run-id', 'my_run_1', '--wait')}"
    )
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            if simulate:
                for snapshot in stack.db.collection("flow_runs").stream():
                    step_id = complete_other_step(snapshot)
                    if step_id is not None:
                        console.print(
                            f"{snapshot.id}: {step_id} completed by the stand-in (--simulate-other-steps)"
                        )
            time.sleep(POLL_SECONDS)


def _shown(path: Path) -> str:
    """A path as short as it can be typed from here."""
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


def _announce(console: Console, child: Child) -> None:
    console.print(f"started {child.name} pid={child.pid} (own process group {child.pid})", style="dim")


def _print_endpoints(console: Console, stack: LocalStack) -> None:
    console.print(
        f"FIRESTORE_EMULATOR_HOST={stack.emulator_host} STORAGE_EMULATOR_HOST={stack.gcs_url} "
        f"GOOGLE_CLOUD_PROJECT={stack.project} bucket gs://{stack.bucket}; triggers via the router "
        f"on 127.0.0.1:{stack.router.port}",
        style="dim",
    )


def _print_artifacts(console: Console, stack: LocalStack, watch: RunWatch, args: argparse.Namespace) -> None:
    output_dir: Path = args.output_dir
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
        console.print(f"  view: {command_line('view', str(local))}")
        if args.keep_running:
            view_uri = command_line("view", uri)
            console.print(f"  or, while the stack runs: STORAGE_EMULATOR_HOST={stack.gcs_url} {view_uri}")


@dataclass
class Interrupted:
    moment: float | None = None  # time.monotonic() of the first SIGINT or SIGTERM
    stopping: bool = False  # the stack is being stopped: no signal interrupts that

    def took(self, stopping: float) -> str:
        """How long the stop took, from the signal when there was one (start-up it cut
        short included), else from `stopping`."""
        if self.moment is not None:
            return f"{time.monotonic() - self.moment:.1f}s after the interrupt"
        return f"{time.monotonic() - stopping:.1f}s"


@contextlib.contextmanager
def _first_signal_interrupts() -> Iterator[Interrupted]:
    """The first SIGINT or SIGTERM raises KeyboardInterrupt (SIGTERM stops the stack as
    Ctrl-C does) and records when it came; later ones, and any once the stop has begun, are
    ignored: a second Ctrl-C can never cut the stop short and leave half the stack running."""
    interrupted = Interrupted()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if interrupted.moment is None:
            interrupted.moment = time.monotonic()
            if not interrupted.stopping:
                raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
