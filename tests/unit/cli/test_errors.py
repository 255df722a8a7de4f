"""One line for every CLI error: the commands that reach Firestore (advance, reap, templates
sync, submit, accounts), run as a user runs them (the console script in a subprocess), without
credentials and with an emulator that is not there. Each ends with exit 2 and one stderr
line, `worker-chart-export <command>: error: ...`, naming the problem and the fix. That it
does so after one 5 s read, not the Firestore client's 60 s of retries, is judged by what the
client sends, not by the clock (a busy machine starts five of these slowly):
tests/unit/adapters/test_checked_client.py. `templates sync --dry-run` needs neither."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN
from worker_chart_export.cli.main import main

NO_CREDENTIALS = (
    "no Google Cloud credentials: run `gcloud auth application-default login`, "
    "or set FIRESTORE_EMULATOR_HOST for the emulator"
)
FIRESTORE_COMMANDS = {
    "advance": ["advance", "--run-id", "run_1"],
    "reap": ["reap"],
    "templates-sync": ["templates", "sync"],
    "submit": ["submit", "--flow-run-path", str(SAMPLE_FLOW_RUN), "--wait"],
    "accounts": ["accounts"],
}
_GOOGLE_ENV = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "FIRESTORE_EMULATOR_HOST",
    "CLOUDSDK_CONFIG",
)


@dataclass(frozen=True)
class Finished:
    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def closed_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def no_credentials_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No key file, an empty gcloud configuration, no metadata server to ask."""
    empty_config = tmp_path / "gcloud"
    empty_config.mkdir(exist_ok=True)
    env = {name: value for name, value in os.environ.items() if name not in _GOOGLE_ENV}
    return {**env, "CLOUDSDK_CONFIG": str(empty_config), "NO_GCE_CHECK": "True", **extra}


def run(argv: Sequence[str], env: dict[str, str]) -> Finished:
    script = shutil.which("worker-chart-export", path=str(Path(sys.executable).parent))
    assert script, "console script worker-chart-export is not installed next to the interpreter"
    done = subprocess.run([script, *argv], capture_output=True, text=True, timeout=120, env=env)
    return Finished(done.returncode, done.stdout, done.stderr)


def run_all(env: dict[str, str]) -> dict[str, Finished]:
    """Every Firestore command at once (each waits on its own deadline)."""
    with ThreadPoolExecutor(max_workers=len(FIRESTORE_COMMANDS)) as pool:
        finished = pool.map(lambda argv: run(argv, env), FIRESTORE_COMMANDS.values())
        return dict(zip(FIRESTORE_COMMANDS, finished, strict=True))


def assert_one_line(results: dict[str, Finished], expected: str) -> None:
    for name, result in results.items():
        assert result.code == 2, (name, result)
        assert result.stdout == "", (name, result)
        command = "templates sync" if name == "templates-sync" else name
        assert result.stderr_lines == [f"worker-chart-export {command}: error: {expected}"], (name, result)


@pytest.mark.slow  # five CLI processes (~2 s of CPU each): the full lane's
def test_without_credentials_each_command_says_how_to_get_them(tmp_path: Path) -> None:
    assert_one_line(run_all(no_credentials_env(tmp_path)), NO_CREDENTIALS)


@pytest.mark.slow  # five CLI processes (~2 s of CPU each): the full lane's
def test_with_a_project_but_no_credentials_each_command_says_how_to_get_them(tmp_path: Path) -> None:
    env = no_credentials_env(tmp_path, GOOGLE_CLOUD_PROJECT="some-project")
    assert_one_line(run_all(env), NO_CREDENTIALS)


@pytest.mark.slow  # five CLI processes (~2 s of CPU each): the full lane's
def test_a_key_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "key.json"
    results = run_all(no_credentials_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(missing)))
    assert_one_line(
        results,
        f"Google Cloud credentials unusable (DefaultCredentialsError: File {missing} was not found.): "
        "run `gcloud auth application-default login`",
    )


@pytest.mark.slow  # five CLI processes (~2 s of CPU each): the full lane's
def test_an_emulator_that_is_not_there_is_named_within_seconds(tmp_path: Path) -> None:
    host = f"127.0.0.1:{closed_port()}"
    assert_one_line(
        run_all(no_credentials_env(tmp_path, FIRESTORE_EMULATOR_HOST=host)),
        f"Firestore emulator at {host} did not answer within 5 s: is the emulator running?",
    )


@pytest.mark.parametrize("where", ["no-credentials", "closed-port"])
def test_templates_dry_run_validates_offline(tmp_path: Path, where: str) -> None:
    extra = {"FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{closed_port()}"} if where == "closed-port" else {}
    result = run(["templates", "sync", "--dry-run"], no_credentials_env(tmp_path, **extra))
    assert result.code == 0, result
    assert "5 template(s) in" in result.stdout and "Firestore was not contacted" in result.stdout
    assert "price_psar_adi_v1: valid" in result.stdout


def test_templates_dry_run_creates_no_client(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import worker_chart_export.adapters.firestore as firestore_adapters

    def no_client(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a dry run created a Firestore client")

    monkeypatch.setattr(firestore_adapters, "make_firestore_client", no_client)
    assert main(["templates", "sync", "--dry-run"]) == 0
    assert "Firestore was not contacted" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="created a Firestore client"):  # the seam is the one used
        main(["templates", "sync"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["advance", "--run-id", "a/b"], "advance: error: --run-id 'a/b': document id contains '/'"),
        (["advance", "--run-id", "__x__"], "advance: error: --run-id '__x__': document id matches __.*__"),
        (
            ["submit", "--flow-run-path", str(SAMPLE_FLOW_RUN), "--run-id", "no spaces"],
            f"submit: error: --flow-run-path {SAMPLE_FLOW_RUN}: not a valid flow_run (flow_run.schema.json): "
            "$.runId:",
        ),
        (
            ["submit", "--flow-run-path", str(SAMPLE_FLOW_RUN), "--timeout", "0"],
            "submit: error: argument --timeout: 0 must be a positive number of seconds",
        ),
        (
            ["submit", "--flow-run-path", "/none.json"],
            "submit: error: --flow-run-path /none.json: No such file",
        ),
    ],
    ids=["slash", "reserved", "schema", "timeout", "no-file"],
)
def test_bad_input_is_one_line_before_firestore_is_reached(
    argv: list[str], expected: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{closed_port()}")  # never reached
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own mistakes end the parse
        code = int(exit.code or 0)
    assert code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"worker-chart-export {expected}"), err
