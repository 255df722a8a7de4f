"""`worker-chart-export advance` and `reap` on the Firestore emulator: one sentence for a
person by default, the same as one JSON object with --json; a run that is not there is one
error line and exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from harness.builders import chart_step, flow_run
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore
from worker_chart_export.cli.main import main
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.types import ClaimStatus

pytestmark = pytest.mark.emulators

RUN = "run_cli"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_advance_says_what_it_did_in_one_sentence(
    firestore_client: firestore.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    document = flow_run({"charts": chart_step(status="PENDING")}, run_id=RUN)
    firestore_client.collection("flow_runs").document(RUN).set({**document, "status": "PENDING"})

    code, out, _ = run(capsys, "advance", "--run-id", RUN)
    assert (code, out) == (0, f"flow_runs/{RUN}: charts made READY and run status set to RUNNING.\n")
    code, out, _ = run(capsys, "advance", "--run-id", RUN)
    assert (code, out) == (0, f"flow_runs/{RUN}: nothing to change (no step to advance; run RUNNING).\n")
    code, out, _ = run(capsys, "advance", "--run-id", RUN, "--json")
    assert code == 0 and json.loads(out) == {
        "runId": RUN,
        "outcome": "UNCHANGED",
        "readySteps": [],
        "runStatus": None,
        "error": None,
        "reason": "no step to advance; run RUNNING",
    }


def test_advance_of_a_run_that_is_not_there_is_one_error_line(
    firestore_client: firestore.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "advance", "--run-id", "nope")
    assert (code, out) == (2, "")
    assert err == "worker-chart-export advance: error: flow_runs/nope does not exist\n"


def test_reap_says_what_it_took_back_in_one_sentence(
    firestore_client: firestore.Client, capsys: pytest.CaptureFixture[str], log_capture: Any
) -> None:
    code, out, _ = run(capsys, "reap")
    assert (code, out) == (0, "reaper pass: no expired lease, nothing to do.\n")

    firestore_client.collection("flow_runs").document(RUN).set(flow_run({"charts": chart_step()}, run_id=RUN))
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    long_ago = datetime.now(UTC) - timedelta(hours=1)  # the worker died an hour ago
    outcome = store.claim_step(RUN, "charts", token="t1", now=long_ago, lease_expires_at=long_ago)
    assert outcome.status is ClaimStatus.CLAIMED

    code, out, _ = run(capsys, "reap", "--json")
    assert code == 0 and json.loads(out) == {
        "retried": [f"{RUN}/charts"],
        "failed": [],
        "counts": {"retried": 1},
        "errors": [],
    }
    store.claim_step(RUN, "charts", token="t2", now=long_ago, lease_expires_at=long_ago)
    code, out, _ = run(capsys, "reap", "--max-attempts", "2")
    assert (code, out) == (
        0,
        "reaper pass: 1 expired lease(s): "
        f"1 FAILED with STEP_LEASE_EXPIRED after 2 attempt(s) ({RUN}/charts).\n",
    )
