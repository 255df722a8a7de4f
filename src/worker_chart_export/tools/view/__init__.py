"""A look at a run: one static, self-contained HTML page for a ChartsOutputsManifest.

`render_page` is pure (manifest + image bytes -> HTML); `sources` reads local folders and GCS;
`command` holds the plain API and the CLI pieces.
"""

from worker_chart_export.command_surface import EXIT_OK
from worker_chart_export.tools.view.command import (
    EXIT_BAD_INPUT,
    ViewResult,
    add_view_arguments,
    add_view_command,
    load_run,
    run_view,
    view_manifest,
)
from worker_chart_export.tools.view.model import ChartImage, StepState, ViewInputError
from worker_chart_export.tools.view.render import Page, render_page

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "ChartImage",
    "Page",
    "StepState",
    "ViewInputError",
    "ViewResult",
    "add_view_arguments",
    "add_view_command",
    "load_run",
    "render_page",
    "run_view",
    "view_manifest",
]
