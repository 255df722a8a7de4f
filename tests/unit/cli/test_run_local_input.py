"""What run-local reads is checked before anything is claimed: the flow_run file against
contracts/flow_run.schema.json, by the very check `submit` runs, and the accounts list (the
--accounts-config-path file or CHART_IMG_ACCOUNTS_JSON) in every mode, mock too. A mistake is
one line naming where it is and what is wrong (never a key), exit 2, nothing written. A state
file run-local wrote is a flow_run the check accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN, chart_step_for, flow_run
from worker_chart_export.cli.main import main

SECRET_KEY = "test-key-0b7e4d1c9a2f4e6b8d3c5a7f9e1b2d4c"
STATE_NAME = "run_20261122_btcusdt_0001.json"  # the sample's runId


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CHARTS_API_MODE", "CHARTS_BUCKET", "CHART_IMG_ACCOUNTS_JSON", "CHARTS_LOCAL_OUTPUT_DIR"):
        monkeypatch.delenv(var, raising=False)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_local(
    capsys: pytest.CaptureFixture[str], flow_run_path: Path, output: Path, *more: str
) -> tuple[int, str, str]:
    return run_cli(
        capsys, "run-local", "--flow-run-path", str(flow_run_path), "--output-dir", str(output), *more
    )


def sample_with(change: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SAMPLE_FLOW_RUN.read_text())
    change(document["steps"]["charts_1h"])
    return document


def misspelt_step_type(step: dict[str, Any]) -> None:
    step["steptype"] = step.pop("stepType")


def misspelt_status(step: dict[str, Any]) -> None:
    step["status"] = "REDY"


def misspelt_timeframe(step: dict[str, Any]) -> None:
    step["timeframe"] = "1H"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (misspelt_step_type, "$.steps.charts_1h: 'stepType' is a required property"),
        (
            misspelt_status,
            "$.steps.charts_1h.status: 'REDY' is not one of "
            "['PENDING', 'READY', 'RUNNING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED']",
        ),
        (misspelt_timeframe, "$.steps.charts_1h.timeframe: '1H' is not one of ['1m', "),
    ],
    ids=["steptype", "REDY", "1H"],
)
def test_a_flow_run_the_schema_refuses_stops_run_local_as_it_stops_submit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, problem: str
) -> None:
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(sample_with(change)))
    output = tmp_path / "out"
    code, out, err = run_local(capsys, path, output)
    assert (code, out) == (2, "")
    [line] = err.splitlines()  # no log line either: nothing started
    assert line.startswith(
        f"worker-chart-export run-local: error: --flow-run-path {path}: not a valid flow_run "
        f"(flow_run.schema.json): {problem}"
    )
    assert not output.exists()  # nothing claimed, nothing written
    # submit refuses the file before it reaches Firestore, with the same words
    code, out, submitted = run_cli(capsys, "submit", "--flow-run-path", str(path))
    assert (code, out) == (2, "")
    assert submitted.replace("submit:", "run-local:", 1) == err


def test_a_state_run_local_wrote_is_a_valid_flow_run_and_a_second_run_on_it_is_a_no_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out"
    code, out, err = run_local(capsys, SAMPLE_FLOW_RUN, output)
    assert code == 0, err
    state = output / "flow_runs" / STATE_NAME
    written = json.loads(state.read_text())["steps"]["charts_1h"]
    assert {"claimToken", "leaseExpiresAt", "attempt", "startedAt", "finishedAt"} <= written.keys()
    code, out, err = run_local(capsys, state, output)
    assert code == 1, err
    assert out.splitlines()[0] == (
        f"CHART_EXPORT NOOP: no READY CHART_EXPORT step in the flow_run state {state} (a step that ran is "
        "not run again): to run it again, delete that file or give another --output-dir (NO_READY_STEP)"
    )


def test_a_failed_step_s_state_is_valid_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FAILED step carries the error object (code, message, details) the worker wrote."""
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(flow_run({"charts": chart_step_for(["no_such_template_v1"])})))
    output = tmp_path / "out"
    code, out, err = run_local(capsys, path, output)
    assert code == 1 and out.startswith("CHART_EXPORT FAILED"), out + err
    state = output / "flow_runs" / "run1.json"
    assert json.loads(state.read_text())["steps"]["charts"]["error"]["details"]  # what the check meets
    code, out, err = run_local(capsys, state, output)
    assert code == 1, err
    assert out.startswith(f"CHART_EXPORT NOOP: no READY CHART_EXPORT step in the flow_run state {state} ")


BAD_ACCOUNTS = [
    (
        '[{"id": "acc1", "apiKey": "' + SECRET_KEY + '"},',
        "not valid JSON at line 1 column 72 (Expecting value)",  # past its 71 characters
    ),
    ('{"id": "acc1", "apiKey": "' + SECRET_KEY + '"}', "expected a JSON array of accounts, got object"),
    ('[{"id": "acc1", "apiKey": "' + SECRET_KEY + ' x"}]', "item 1: 'apiKey' must be a non-empty string"),
    ('[{"id": "acc1", "key": "' + SECRET_KEY + '"}]', "item 1: missing 'apiKey'"),
]
BAD_IDS = ["truncated", "object", "key-with-a-space", "misnamed-key"]


@pytest.mark.parametrize(("text", "problem"), BAD_ACCOUNTS, ids=BAD_IDS)
def test_a_malformed_accounts_file_stops_mock_mode_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    accounts = tmp_path / "chart-img.accounts.local.json"
    accounts.write_text(text)
    output = tmp_path / "out"
    more = ("--charts-api-mode", "mock", "--accounts-config-path", str(accounts))
    code, out, err = run_local(capsys, SAMPLE_FLOW_RUN, output, *more)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    named = f"--accounts-config-path {accounts}"
    assert line.startswith(f"worker-chart-export run-local: error: {named}: {problem}")
    assert SECRET_KEY not in err
    assert not output.exists()


@pytest.mark.parametrize(("text", "problem"), BAD_ACCOUNTS, ids=BAD_IDS)
def test_a_malformed_accounts_variable_stops_mock_mode_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    problem: str,
) -> None:
    monkeypatch.setenv("CHART_IMG_ACCOUNTS_JSON", text)
    output = tmp_path / "out"
    code, out, err = run_local(capsys, SAMPLE_FLOW_RUN, output)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(f"worker-chart-export run-local: error: CHART_IMG_ACCOUNTS_JSON: {problem}")
    assert SECRET_KEY not in err
    assert not output.exists()


def test_mock_mode_still_needs_no_accounts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check stops a broken list, not its absence (an empty variable is none)."""
    monkeypatch.setenv("CHART_IMG_ACCOUNTS_JSON", "")
    output = tmp_path / "out"
    code, out, err = run_local(capsys, SAMPLE_FLOW_RUN, output, "--charts-api-mode", "mock")
    assert code == 0 and out.startswith("CHART_EXPORT SUCCEEDED"), err
