"""Issue 39: `stack up --charts-api-mode real` never called CHART-IMG: it ran the worker in real
mode against the local CHART-IMG stand-in. The value says so now (`stand-in`); `real` is still
taken, with a note saying what it means."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from worker_chart_export.cli.main import main
from worker_chart_export.tools.devstack import stack
from worker_chart_export.tools.devstack.processes import StackError

NOTE = (
    "worker-chart-export stack up: note: --charts-api-mode real is the old spelling of --charts-api-mode "
    "stand-in: the worker runs in real mode against the local CHART-IMG stand-in, never CHART-IMG itself"
)


def test_the_help_names_the_stand_in_and_says_it_is_not_chart_img(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stack", "up", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--charts-api-mode {mock,stand-in,real}" in text
    assert (
        "stand-in: the worker's real mode against the local CHART-IMG stand-in "
        "(tests/harness/chart_img_server.py, never CHART-IMG itself)"
    ) in text
    assert "real: the old spelling of stand-in" in text


def test_the_old_spelling_still_works_and_says_what_it_means(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["stack", "up", "--charts-api-mode", "real", "--flow-run", "/none.json"])
    _, err = capsys.readouterr()
    assert code == 2
    note, error = err.splitlines()
    assert note == NOTE
    assert error.startswith("worker-chart-export stack up: error: --flow-run /none.json: No such file")


def test_the_new_spelling_gives_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["stack", "up", "--charts-api-mode", "stand-in", "--flow-run", "/none.json"])
    _, err = capsys.readouterr()
    assert code == 2 and "note:" not in err


class _StackThatStopsAtStart:
    """Takes the options `stack up` builds, and refuses to start (nothing is run)."""

    made: ClassVar[list[Any]] = []

    def __init__(self, options: Any) -> None:
        self.made.append(options)
        self.supervisor = SimpleNamespace(on_start=None)

    def start(self) -> None:
        raise StackError("not started in this test")

    def stop(self) -> int:
        return 0


@pytest.mark.parametrize(("value", "worker_mode"), [("mock", "mock"), ("stand-in", "real"), ("real", "real")])
def test_each_value_runs_the_worker_in_its_mode(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    value: str,
    worker_mode: str,
) -> None:
    _StackThatStopsAtStart.made.clear()
    monkeypatch.setattr(stack, "LocalStack", _StackThatStopsAtStart)
    code = main(["stack", "up", "--charts-api-mode", value, "--output-dir", str(tmp_path)])
    capsys.readouterr()
    assert code == 2
    [options] = _StackThatStopsAtStart.made
    assert options.charts_api_mode == worker_mode
