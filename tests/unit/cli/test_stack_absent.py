"""Without tools/devstack (a wheel, the image: a development tool left out), `stack` is still
a command, and says in one line how to get the stack."""

from __future__ import annotations

import sys

import pytest

from worker_chart_export.cli.main import main


@pytest.mark.parametrize("argv", [["stack", "up"], ["stack"], ["stack", "up", "--timeout", "5"]])
def test_stack_without_the_devstack_says_how_to_get_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "worker_chart_export.tools.devstack", None)  # import fails
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("worker-chart-export stack: error: the local stack is a development tool")
    assert "source checkout" in line and "bash scripts/bootstrap.sh" in line


def test_with_the_devstack_stack_up_is_the_real_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["stack", "up", "--help"])
    assert done.value.code == 0
    assert "--flow-run" in capsys.readouterr().out
