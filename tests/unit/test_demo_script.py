"""Issue 39: `bash scripts/demo.sh` was silent for its first two minutes (the quiet install).
Each of its two steps now says what it does before it starts. Run here on a copy of the script
whose install and run-local stand-ins only say they ran (nothing is installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.builders import REPO

INSTALLING = (
    "demo: 1/2 installing the project and its pinned dependencies into .venv/ (scripts/bootstrap.sh; "
    "about 15 s the first time, a moment after)"
)
RENDERING = (
    "demo: 2/2 rendering the bundled sample flow_run (fixtures/flow_run.sample.json) in mock mode: "
    "recorded answers, no network, no cloud account"
)


def test_each_step_is_announced_before_it_runs(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(REPO / "scripts" / "demo.sh", scripts / "demo.sh")
    (scripts / "bootstrap.sh").write_text("echo 'bootstrap ran' >&2\n")
    cli = tmp_path / ".venv" / "bin" / "worker-chart-export"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\necho \"run-local ran: $*\" >&2\necho 'CHART_EXPORT SUCCEEDED'\n")
    cli.chmod(0o755)
    # stdout and stderr in one stream, in the order they were written
    done = subprocess.run(
        ["bash", str(scripts / "demo.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines() == [
        INSTALLING,
        "bootstrap ran",
        RENDERING,
        "CHART_EXPORT SUCCEEDED",
        "logs (JSON lines): out/demo.log",
    ]
    assert (tmp_path / "out" / "demo.log").read_text().startswith("run-local ran: run-local --flow-run-path")
