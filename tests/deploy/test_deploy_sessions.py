"""deploy.sh with TradingView sessions (issue 40 item 3), run for real against the fake project,
every gcloud call judged by the installed Google Cloud CLI: SESSIONS_FILE becomes a secret of its
own, read back (ENABLED, its bytes, the worker's sessions parser) and mounted by the worker at
that pinned version beside the accounts; a re-deploy keeps it; a new file adds a version; a bad
file stops the deploy before any call, naming the variable, never a value."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from deploy_sandbox import PROJECT_ID, Deploy, Sandbox
from gcloud_cli import GcloudJudge
from test_deploy_real_cli import mounted_secret, ran_through

SECRET = "chart-img-tradingview-sessions"
SESSIONS = [{"id": "mine", "sessionId": "tv-sid-not-a-real-session", "sessionIdSign": "tv-sign-not-real-1"}]
RUNTIME_SA = f"serviceAccount:worker-chart-export@{PROJECT_ID}.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def with_sessions(judge: GcloudJudge, tmp_path_factory: pytest.TempPathFactory) -> tuple[Sandbox, Deploy]:
    root = tmp_path_factory.mktemp("sessions")
    sandbox = Sandbox(root, judge.socket_path)
    (root / "tv.sessions.json").write_text(json.dumps(SESSIONS))
    return sandbox, sandbox.deploy(SESSIONS_FILE="tv.sessions.json")  # relative: the caller's folder


def test_the_sessions_file_becomes_its_own_secret_mounted_at_the_version_read_back(
    with_sessions: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = with_sessions
    ran_through(deploy)
    [version] = deploy.state["secret_versions"][SECRET]
    assert json.loads(base64.b64decode(version)) == SESSIONS
    assert mounted_secret(deploy) == (
        f"CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:1,CHART_IMG_SESSIONS_JSON={SECRET}:1"
    )
    read_back = [c[3:5] for c in deploy.find("secrets", "versions", "access")]
    assert read_back == [["1", "--secret=chart-img-accounts"], ["1", f"--secret={SECRET}"]]
    assert f"secret {SECRET}: version 1 read back: ENABLED, the sessions the worker takes" in deploy.stdout
    assert ("roles/secretmanager.secretAccessor", RUNTIME_SA) in deploy.bindings(f"secret:{SECRET}")
    for value in ("tv-sid-not-a-real-session", "tv-sign-not-real-1"):
        assert value not in deploy.stdout + deploy.stderr


def test_a_redeploy_keeps_the_sessions_and_a_new_file_adds_a_version(
    with_sessions: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = with_sessions[0].copy(tmp_path)
    kept = sandbox.deploy()  # no SESSIONS_FILE: the secret exists, its latest version stays mounted
    ran_through(kept)
    assert kept.find("secrets", "versions", "add") == []
    assert mounted_secret(kept).endswith(f",CHART_IMG_SESSIONS_JSON={SECRET}:1")

    renewed = tmp_path / "renewed.json"
    renewed.write_text(json.dumps([{**SESSIONS[0], "sessionIdSign": "tv-sign-not-real-2"}]))
    again = sandbox.deploy(SESSIONS_FILE=str(renewed))
    ran_through(again)
    assert len(again.state["secret_versions"][SECRET]) == 2
    assert mounted_secret(again).endswith(f",CHART_IMG_SESSIONS_JSON={SECRET}:2")


def test_without_sessions_the_worker_mounts_the_accounts_alone(first: tuple[Sandbox, Deploy]) -> None:
    deploy = first[1]
    ran_through(deploy)
    assert mounted_secret(deploy) == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:1"
    assert SECRET not in deploy.state.get("secret_versions", {})


def test_a_bad_sessions_file_stops_the_deploy_before_any_call(judge: GcloudJudge, tmp_path: Path) -> None:
    sessions = tmp_path / "tv.sessions.json"
    sessions.write_text(json.dumps([{"id": "mine", "sessionId": "tv-sid-not-a-real-session"}]))
    deploy = Sandbox(tmp_path, judge.socket_path).deploy(SESSIONS_FILE=str(sessions))
    assert deploy.code != 0
    assert f"SESSIONS_FILE {sessions}: item 1: missing 'sessionIdSign'" in deploy.stderr
    assert "tv-sid-not-a-real-session" not in deploy.stdout + deploy.stderr
    assert deploy.calls == []
