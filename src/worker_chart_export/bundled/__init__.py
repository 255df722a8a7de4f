"""Where the files shipped with the worker are: JSON Schemas, CHART-IMG's documented lists,
chart templates, fixtures.

They live at the repository's top level (contracts/, chart-templates/, fixtures/), where
people edit them, and the wheel carries them as package data under
`worker_chart_export/_bundled/` (pyproject maps the folders there). An installed wheel reads
that copy; an editable install or a source checkout has no copy and reads the repository's
folders, so an edit shows up at once.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# bundled name (a package segment) -> folder at the repository's top level
_CHECKOUT_FOLDERS = {
    "contracts": "contracts",
    "chart_templates": "chart-templates",
    "fixtures": "fixtures",
}


def bundled_dir(name: str) -> Path:
    """The folder `name` ("contracts", "chart_templates" or "fixtures") as a real path."""
    folder = _CHECKOUT_FOLDERS[name]
    packaged = Path(str(files("worker_chart_export").joinpath("_bundled", name)))
    if packaged.is_dir():
        return packaged
    # src/worker_chart_export/bundled/__init__.py -> the checkout's root
    return Path(__file__).resolve().parents[3] / folder


def contracts_dir() -> Path:
    return bundled_dir("contracts")


def chart_img_docs_dir() -> Path:
    """contracts/chart-img/: CHART-IMG's documented lists (read by bundled.chart_img_docs)."""
    return contracts_dir() / "chart-img"


def chart_templates_dir() -> Path:
    return bundled_dir("chart_templates")


def fixtures_dir() -> Path:
    return bundled_dir("fixtures")
