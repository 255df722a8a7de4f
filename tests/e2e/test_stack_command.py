"""`worker-chart-export stack up` as a new user runs it: the console script in a subprocess,
its output captured. It takes the bundled sample to a settled run, downloads the artifacts,
prints hints that work as printed, and leaves no process behind, also when interrupted
(SIGINT, as Ctrl-C sends) at several moments of start-up and mid-run. With --keep-running,
the `submit` lines of docs/stack.md and docs/usage.md run as written against it.

"No process behind" is checked on /proc: the command prints the pid of every child it
starts, each the leader of its own session; after the command exits, no process may be in
any of those sessions or process groups, nor in the command's own. Whether it was prompt is
judged by that, not by a clock: the command reports the time itself.
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

from harness.builders import REPO
from harness.doc_commands import commands_in

pytestmark = pytest.mark.emulators

RUN_ID = "run_20261122_btcusdt_0001"  # the bundled sample's
STARTED = re.compile(r"^started (?P<name>\S+) pid=(?P<pid>\d+)", re.MULTILINE)
STOPPED = re.compile(
    r"^stack stopped \((?P<groups>\d+) process groups\) in \d+\.\ds(?P<after> after the interrupt)?$", re.M
)
STACK_PROCESSES = {
    "firestore-emulator",
    "fake-gcs-server",
    "advance_flow",
    "on_flow_run_updated",
    "reap_expired_leases",
}


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


def wait_for_text(process: subprocess.Popen[bytes], output: Path, text: str | re.Pattern[str]) -> str:
    """The command's output once `text` is in it; a failure as soon as it exits without it
    (pytest-timeout, pyproject, ends a wait for a line never printed)."""
    while True:
        exited = process.poll() is not None  # before the read: a last line still counts
        current = output.read_text(errors="replace")
        if text.search(current) if isinstance(text, re.Pattern) else text in current:
            return current
        if exited:
            pytest.fail(f"{text!r} never appeared (exit {process.poll()}):\n{current[-4000:]}", pytrace=False)
        time.sleep(0.02)


def run_as_printed(
    line: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command the stack printed (a hint), run by a shell exactly as printed (until it ends:
    pytest-timeout ends one that hangs, and run() kills it then)."""
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, env=env or dict(os.environ)
    )


def test_stack_up_settles_the_bundled_sample_and_leaves_nothing_running(
    tmp_path: Path, launched: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    process, output = launch(launched, tmp_path)
    code = process.wait()  # it settles the run and exits by itself: only pytest-timeout guards a hang
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
    assert set(sessions) == STACK_PROCESSES
    assert survivors({*sessions.values(), process.pid}) == []
    [stopped] = STOPPED.findall(text)
    assert stopped == ("5", "")

    # its logs are under the output folder, one per process, not in /tmp
    assert "logs: out/stack/logs/" in text
    assert {path.stem for path in (tmp_path / "out" / "stack" / "logs").glob("*.log")} == STACK_PROCESSES

    # the artifacts were downloaded into run-local's bucket mirror, where `view` reads them
    manifests = list((tmp_path / "out" / "stack" / "gcs").glob(f"*/charts/{RUN_ID}/charts_1h/manifest.json"))
    assert len(manifests) == 1, text[-2000:]
    assert len(list(manifests[0].parent.glob("*.png"))) == 3
    # the hint works as printed, and only true hints are printed (the stack is gone)
    [view] = re.findall(r"^  view: (.+)$", text, re.M)
    assert view.endswith(f" view {manifests[0].parent.relative_to(tmp_path)}")
    assert "while the stack runs" not in text and "keeps running" not in text
    viewed = run_as_printed(view, tmp_path)
    assert viewed.returncode == 0, viewed.stderr
    page = tmp_path / "out" / "view" / f"chart-view-{RUN_ID}-charts_1h.html"
    assert viewed.stdout == f"SUCCEEDED: page written to {page.as_uri()}\n"
    # the live table folds the manifest's URI rather than cutting it: every character is there
    uri = f"{manifests[0].relative_to(tmp_path / 'out' / 'stack' / 'gcs')}"
    notes = "".join(re.findall(r"│ ([^│]*?) *│$", text, re.M))
    assert f"gs://{uri}" in notes.replace(" ", "")


@pytest.mark.parametrize(
    "moment",
    [
        "logs:",  # the start is about to begin
        re.compile(r"^started ", re.M),  # the first child is starting
        re.compile(r"(?:^started .*\n){3}", re.M),  # three of five, the JVM likely still booting
        "stack ready",  # everything up, the run not yet created
        "llm_report: PENDING -> READY",  # mid-run
    ],
    ids=["before-start", "first-child", "third-child", "ready", "mid-run"],
)
def test_ctrl_c_at_any_moment_stops_everything_the_stack_started(
    tmp_path: Path, launched: list[tuple[subprocess.Popen[bytes], Path]], moment: str | re.Pattern[str]
) -> None:
    # without the stand-in for other steps the LLM step stays READY: the run never settles
    process, output = launch(launched, tmp_path, "--no-simulate-other-steps")
    wait_for_text(process, output, moment)

    os.kill(process.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground command
    code = process.wait()  # a stop that hangs is ended by pytest-timeout: the judge is below
    text = output.read_text(errors="replace")

    assert code == 130, text[-4000:]
    assert "interrupted: stopping the stack" in text and "settled" not in text
    assert "Traceback" not in text
    sessions = started_sessions(text)
    assert survivors({*sessions.values(), process.pid}) == [], text[-4000:]
    # the report counts every group it stopped and times the stop from the Ctrl-C
    [(groups, after)] = STOPPED.findall(text)
    assert (int(groups), after) == (len(sessions), " after the interrupt"), text[-2000:]


def test_submit_as_the_docs_write_it_settles_on_a_running_stack(
    tmp_path: Path, launched: list[tuple[subprocess.Popen[bytes], Path]]
) -> None:
    process, output = launch(launched, tmp_path, "--keep-running")
    # the line it needs, whole: the "Ctrl-C stops it" line before it is printed apart
    export_line = re.compile(r"^  (export FIRESTORE_EMULATOR_HOST=\S+ STORAGE_EMULATOR_HOST=\S+ \S+)\n", re.M)
    text = wait_for_text(process, output, export_line)
    [export] = export_line.findall(text)
    assert "keeps running (--keep-running)" in text and "while the stack runs" in text
    checkout = tmp_path / "checkout"  # the docs' commands run from a checkout's root
    checkout.mkdir()
    for name in (".venv", "fixtures"):
        (checkout / name).symlink_to(REPO / name)

    for doc, run_id in (("docs/stack.md", "my_run_1"), ("docs/usage.md", "my_first_run")):
        lines = [command.text for command in commands_in(REPO / doc)]
        submit = next(
            i
            for i, line in enumerate(lines)
            if ".venv/bin/worker-chart-export submit" in line and "fixtures/flow_run.sample.json" in line
        )
        assert lines[submit - 1].startswith("export FIRESTORE_EMULATOR_HOST=")  # the line to paste
        assert f"--run-id {run_id} --wait" in lines[submit]
        done = run_as_printed(f"{export}\n{lines[submit]}", checkout)  # pasted, then as written
        assert done.returncode == 0, (doc, done.stdout, done.stderr)
        assert f"run {run_id}: SUCCEEDED" in done.stdout, done.stdout
        # its hint, run as printed in the same shell, shows the charts from the bucket itself
        [view] = re.findall(r"^  view: (.+)$", done.stdout, re.M)
        viewed = run_as_printed(f"{export}\n{view}", checkout)
        assert viewed.returncode == 0 and viewed.stdout.startswith("SUCCEEDED: page written to"), viewed

    os.kill(process.pid, signal.SIGINT)
    code = process.wait()
    text = output.read_text(errors="replace")
    assert code == 0, text[-3000:]  # the stack's own run SUCCEEDED; Ctrl-C was the way to stop it
    assert re.search(r"completed by the stand-in", text)
    assert survivors({*started_sessions(text).values(), process.pid}) == []
