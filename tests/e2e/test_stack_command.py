"""`worker-chart-export stack up` as a new user runs it: the console script in a subprocess,
its output captured. It takes the bundled sample to a settled run, downloads the artifacts,
and leaves no process behind, also when interrupted (SIGINT, as Ctrl-C sends) mid-run.

"No process behind" is checked on /proc: the command prints the pid of every child it
starts, each the leader of its own session; after the command exits, no process may be in
any of those sessions or process groups, nor in the command's own.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulators

RUN_ID = "run_20261122_btcusdt_0001"  # the bundled sample's
STARTED = re.compile(r"^started (?P<name>\S+) pid=(?P<pid>\d+)", re.MULTILINE)
COMMAND_TIMEOUT_SECONDS = 120.0


def stack_command(*flags: str) -> list[str]:
    script = shutil.which("worker-chart-export", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.fail("console script worker-chart-export not installed next to the interpreter", pytrace=False)
    return [script, "stack", "up", *flags]


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    """Started commands; killed by group if a test failed before they ended."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    yield started
    for process, _ in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def launch(
    launched: list[tuple[subprocess.Popen[bytes], Path]], cwd: Path, *flags: str
) -> tuple[subprocess.Popen[bytes], Path]:
    output = cwd / "stack-output.txt"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            stack_command(*flags),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # the test's handle on everything it might leave
        )
    launched.append((process, output))
    return process, output


def survivors(session_ids: set[int]) -> list[str]:
    """Processes (pid and command) whose process group or session is one of `session_ids`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        # fields after the command name in parentheses: state ppid pgrp session ...
        _, pgrp, session = stat.rsplit(")", 1)[1].split()[1:4]
        if int(pgrp) in session_ids or int(session) in session_ids:
            found.append(f"{entry.name}: {command[:200]}")
    return found


def started_sessions(output: str) -> dict[str, int]:
    return {match["name"]: int(match["pid"]) for match in STARTED.finditer(output)}


def wait_for_text(process: subprocess.Popen[bytes], output: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        current = output.read_text(errors="replace")
        if text in current:
            return current
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{text!r} never appeared (exit {process.poll()}):\n{current[-4000:]}", pytrace=False)
        time.sleep(0.1)


def test_stack_up_settles_the_bundled_sample_and_leaves_nothing_running(
    tmp_path: Path, launched: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    process, output = launch(launched, tmp_path)
    code = process.wait(timeout=COMMAND_TIMEOUT_SECONDS)
    text = output.read_text(errors="replace")

    assert code == 0, text[-4000:]
    assert f"run {RUN_ID} settled: SUCCEEDED" in text
    # The live view polls the run: it shows every status it observed, in order, but a step
    # may pass through RUNNING between two polls (a mock-mode chart step takes ~0.3 s).
    for step in ("charts_1h", "llm_report"):
        seen = re.findall(rf"{step}: (\S+) -> (\S+)", text)
        assert seen and seen[-1][1] == "SUCCEEDED", text[-4000:]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(seen)), seen  # a chain
    assert "simulated stand-in" in text  # the LLM step is labelled as the stack's stand-in
    sessions = started_sessions(text)
    assert set(sessions) == {
        "firestore-emulator",
        "fake-gcs-server",
        "advance_flow",
        "on_flow_run_updated",
        "reap_expired_leases",
    }
    assert survivors({*sessions.values(), process.pid}) == []

    # the artifacts were downloaded into run-local's bucket mirror, where `view` reads them
    manifests = list((tmp_path / "out" / "stack" / "gcs").glob(f"*/charts/{RUN_ID}/charts_1h/manifest.json"))
    assert len(manifests) == 1, text[-2000:]
    assert len(list(manifests[0].parent.glob("*.png"))) == 3
    assert f"worker-chart-export view {manifests[0].parent.relative_to(tmp_path)}" in text


def test_ctrl_c_mid_run_stops_everything_the_stack_started(
    tmp_path: Path, launched: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    # without the stand-in for other steps the LLM step stays READY: the run never settles
    process, output = launch(launched, tmp_path, "--no-simulate-other-steps")
    text = wait_for_text(process, output, "llm_report: PENDING -> READY", COMMAND_TIMEOUT_SECONDS)
    sessions = started_sessions(text)
    assert len(sessions) == 5 and survivors(set(sessions.values())), "the stack should be running now"

    os.kill(process.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground command
    code = process.wait(timeout=60)
    text = output.read_text(errors="replace")

    assert code == 130, text[-4000:]
    assert "interrupted: stopping the stack" in text and "settled" not in text
    assert survivors({*sessions.values(), process.pid}) == []
