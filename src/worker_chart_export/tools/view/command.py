"""`worker-chart-export view`: the plain API (`view_manifest`) and the subcommand
(`add_view_command`, `run_view`). The page goes where --output says, by default under
out/view/ of the current folder: never beside the input (a bucket mirror, a step's folder).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker_chart_export import known_keys
from worker_chart_export.command_surface import EXIT_OK, EXIT_USAGE, USAGE_MEANING, add_command
from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.core.step.success import step_status
from worker_chart_export.tools.view.model import StepState, ViewInputError
from worker_chart_export.tools.view.render import render_page
from worker_chart_export.tools.view.sources import LoadedRun, load_gcs, load_local, parse_state

EXIT_BAD_INPUT = EXIT_USAGE
DEFAULT_FOLDER = Path("out") / "view"


@dataclass(frozen=True)
class ViewResult:
    page_path: Path
    source: str  # the manifest that was rendered (path or gs:// URI)
    status: str  # the status the page shows
    problems: tuple[str, ...]  # what the page flags: missing PNGs, inconsistencies


def load_run(source: str | Path) -> LoadedRun:
    """A manifest path, a folder (step folder or run-local's output folder) or a gs:// URI."""
    text = str(source)
    if text.startswith("gs://"):
        return load_gcs(text)
    return load_local(Path(text))


def default_page_path(run: LoadedRun) -> Path:
    """out/view/chart-view-<runId>-<stepId>.html under the current folder, whatever the input.

    runId and stepId passed the schema's safeId pattern, so they are safe in a file name.
    """
    return DEFAULT_FOLDER / f"chart-view-{run.manifest.run_id}-{run.manifest.step_id}.html"


def _read_state(path: Path, run: LoadedRun) -> StepState:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ViewInputError(f"flow_run state {path}: cannot be read: {exc.strerror or exc}") from exc
    return parse_state(raw, str(path), run.manifest.run_id, run.manifest.step_id)


def view_manifest(
    source: str | Path, out: Path | None = None, flow_run_state: Path | None = None
) -> ViewResult:
    """Render the run's page and write it; raises ViewInputError on input that cannot be used."""
    run = load_run(source)
    state = _read_state(flow_run_state, run) if flow_run_state is not None else None
    page = render_page(
        run.manifest, run.images, source=run.source, state=state, redaction=known_keys.redaction()
    )
    page_path = out if out is not None else default_page_path(run)
    try:
        page_path.parent.mkdir(parents=True, exist_ok=True)
        page_path.write_text(page.html, encoding="utf-8")
    except OSError as exc:
        raise ViewInputError(f"cannot write the page to {page_path}: {exc.strerror or exc}") from exc
    status = state.status if state is not None else _derived_status(run)
    return ViewResult(page_path, run.source, status, page.problems)


def _derived_status(run: LoadedRun) -> str:
    return step_status(len(run.manifest.items), run.manifest.min_images).value


def add_view_command(commands: Any) -> None:
    view = add_command(
        commands,
        "view",
        summary="write one HTML page of a run's charts (a local folder or gs://) and print its file:// URL",
        description=(
            "Renders a ChartsOutputsManifest as one static HTML page: every chart with its template,\n"
            "kind, symbol, timeframe and generatedAt, the failures with their codes, the step's\n"
            "status and minImages. The images are embedded: the page needs no network.\n"
            "MANIFEST: a manifest.json, its step folder, run-local's output folder (one manifest\n"
            "below it), or gs://bucket/charts/<runId>/<stepId>/ (fake-gcs-server with\n"
            "STORAGE_EMULATOR_HOST)."
        ),
        exit_codes={0: "the page was written (problems it flags are also on stderr)", 2: USAGE_MEANING},
        run=run_view,
    )
    add_view_arguments(view)


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="what to show (see above)")
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help=f"where to write the page (default {DEFAULT_FOLDER}/chart-view-<runId>-<stepId>.html)",
    )
    parser.add_argument(
        "--flow-run-state",
        type=Path,
        metavar="FILE",
        help="a flow_run JSON (e.g. run-local's <output-dir>/flow_runs/<runId>.json) whose step "
        "status the page shows (default: the status the manifest implies)",
    )


def run_view(args: argparse.Namespace) -> int:
    """0 the page was written (problems, if any, are on the page and on stderr); a
    ViewInputError is a UsageError: one line, exit 2."""
    try:
        result = view_manifest(args.manifest, out=args.output, flow_run_state=args.flow_run_state)
    except ViewInputError as exc:
        raise UsageError(str(exc)) from None
    for problem in result.problems:
        print(f"{args.where}: problem: {problem}", file=sys.stderr)
    print(f"{result.status}: page written to {result.page_path.resolve().as_uri()}")
    return EXIT_OK
