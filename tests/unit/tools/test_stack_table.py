"""The stack's live table keeps a step's whole gs:// URI on a narrow terminal: the note
column folds it onto more lines instead of cutting it with an ellipsis."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from worker_chart_export.tools.devstack.watch import RunWatch

URI = "gs://stack-charts-c070675a/charts/run_20261122_btcusdt_0001/charts_1h/manifest.json"


def rendered(watch: RunWatch, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(watch.table())
    output = console.file
    assert isinstance(output, io.StringIO)
    return output.getvalue()


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_manifest_uri_survives_any_width(width: int) -> None:
    reference: Any = SimpleNamespace(id="run_20261122_btcusdt_0001")
    watch = RunWatch(reference, simulate_other_steps=False)
    watch.document = {
        "runId": reference.id,
        "status": "SUCCEEDED",
        "steps": {
            "charts_1h": {
                "stepType": "CHART_EXPORT",
                "status": "SUCCEEDED",
                "attempt": 1,
                "outputs": {"outputsManifestGcsUri": URI},
            }
        },
    }
    text = rendered(watch, width)
    assert "…" not in text
    notes = "".join(re.findall(r"│ ([^│]*?) *│$", text, re.M))  # the last column, line by line
    assert URI in notes.replace(" ", "")
    assert max(len(line) for line in text.splitlines()) <= width
