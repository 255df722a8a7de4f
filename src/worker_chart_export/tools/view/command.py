"""`worker-chart-export view`: the plain API (`view_manifest`) and the CLI pieces the lead
wires into cli.py (`add_view_arguments`, `run_view`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from worker_chart_export import known_keys
from worker_chart_export.core.outcome import step_status
from worker_chart_export.tools.view.model import StepState, ViewInputError
from worker_chart_export.tools.view.render import render_page
from worker_chart_export.tools.view.sources import LoadedRun, load_gcs, load_local, parse_state

EXIT_OK, EXIT_BAD_INPUT = 0, 2


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
    """Beside the manifest for local input; in the current folder for gs:// input.

    runId and stepId passed the schema's safeId pattern, so they are safe in a file name.
    """
    name = f"chart-view-{run.manifest['runId']}-{run.manifest['stepId']}.html"
    return (run.local_dir or Path.cwd()) / name


def _read_state(path: Path, run: LoadedRun) -> StepState:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ViewInputError(f"flow_run state {path}: cannot be read: {exc.strerror or exc}") from exc
    return parse_state(raw, str(path), run.manifest["runId"], run.manifest["stepId"])


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
    return step_status(len(run.manifest["items"]), run.manifest["minImages"]).value


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "manifest",
        help="manifest.json, its step folder, run-local's output folder (one manifest below it), "
        "or gs://bucket/charts/<runId>/<stepId>/manifest.json",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write the page (default: beside a local manifest, "
        "./chart-view-<runId>-<stepId>.html for gs://)",
    )
    parser.add_argument(
        "--flow-run-state",
        type=Path,
        help="a flow_run JSON (e.g. run-local's <output-dir>/flow_runs/<runId>.json) whose "
        "step status the page shows instead of the one derived from the manifest",
    )


def run_view(args: argparse.Namespace) -> int:
    """0 the page was written (problems, if any, are on the page and on stderr); 2 bad input."""
    try:
        result = view_manifest(args.manifest, out=args.out, flow_run_state=args.flow_run_state)
    except ViewInputError as exc:
        print(f"view: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for problem in result.problems:
        print(f"view: problem: {problem}", file=sys.stderr)
    print(f"{result.status}: page written to {result.page_path.resolve().as_uri()}")
    return EXIT_OK
