"""Values shared by the reading and the rendering of a run's page. No I/O."""

from __future__ import annotations

from dataclasses import dataclass


class ViewInputError(Exception):
    """The manifest, an option or the state file cannot be used: the message names the problem."""


@dataclass(frozen=True)
class ChartImage:
    """What reading found for one item's `png_gcs_uri`.

    `data` is None when the PNG could not be read; `problem` then says why. `where` is the place
    it was read from (a local path or a gs:// URI), shown on the page.
    """

    where: str
    data: bytes | None = None
    problem: str | None = None


@dataclass(frozen=True)
class StepState:
    """The step as a flow_run document records it (when a state file is given)."""

    status: str
    source: str  # where the state came from, shown on the page
    error_code: str | None = None
    error_message: str | None = None
