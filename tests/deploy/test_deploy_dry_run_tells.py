"""What deploy.sh --dry-run tells a reader besides the commands: every read-only look-up marked
`? `, the places a real run would stop, files it cites that exist afterwards, the Firestore
rules release, the pinned secret version, internal ingress, a private bucket on request, and
every configuration problem at once (the accounts file's among them)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_deploy_dry_run import DEPLOY, SAMPLE, DryRun, dry_run, flag, program

from harness.builders import REPO

RULES = REPO / "deploy" / "firestore.rules"
RULES_API = "https://firebaserules.googleapis.com/v1/projects/acme-charts"
# gcloud verbs that only read; `gcloud alpha monitoring policies list --help` reads the CLI
READ_ONLY = {"describe", "list", "get-iam-policy", "version", "print-access-token", "access"}
SECRET_PLACEHOLDER = "<latest version of chart-img-accounts, read back below>"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(tmp_path_factory.mktemp("dry"))


def reads_only(command: list[str]) -> bool:
    command = program(command)
    if command[0] == "curl":
        return flag_after(command, "--request") == "GET"
    return command[0] == "gcloud" and (bool(READ_ONLY & set(command)) or "--help" in command)


def flag_after(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_every_read_only_call_is_marked_and_no_change_is(sample: DryRun) -> None:
    assert sample.probes and all(reads_only(p) for p in sample.probes), [
        p for p in sample.probes if not reads_only(p)
    ]
    assert not [c for c in sample.commands if reads_only(c)]
    # the four issue 30 found unmarked: the project, the subscriptions, the reaper's URL, the policies
    looked_up = {" ".join(p[:4]) for p in sample.probes}
    assert {
        "gcloud projects describe acme-charts",
        "gcloud eventarc triggers describe",
        "gcloud run services describe",
        "gcloud alpha monitoring policies",
    } <= looked_up


def test_every_file_it_cites_exists_after_it(sample: DryRun) -> None:
    cited = [
        value
        for command in sample.commands
        for name in ("config-from-file", "policy-from-file", "data-file")
        if (value := flag(command, name)) is not None
    ]
    assert len(cited) >= 7  # 3 metrics, 3 policies, the dashboard
    assert [c for c in cited if not (REPO / c).is_file()] == []
    dashboard = REPO / next(c for c in cited if c.endswith(".dashboard.json"))
    assert json.loads(dashboard.read_text())["name"] == "projects/acme-charts/dashboards/worker-chart-export"


def test_the_stops_of_a_real_run_are_announced(sample: DryRun) -> None:
    stops = "\n".join(n for n in sample.notes if "a real run stops here" in n)
    for expected in (
        "run 'gcloud auth login'",
        "run 'gcloud auth application-default login'",
        "project acme-charts cannot be read",
        "secret chart-img-accounts has no version latest to deploy: set ACCOUNTS_FILE",
        "in a location other than eur3",
        "gcloud components install alpha",
        "that version is not ENABLED or the worker's accounts parser refuses it",
        "several alert policies are named",
    ):
        assert expected in stops, expected


def test_without_accounts_file_no_secret_is_created(sample: DryRun) -> None:
    # a real run without ACCOUNTS_FILE stops at the preflight when the secret is missing
    assert sample.find("gcloud", "secrets", "create") == []
    [first] = [p for p in sample.probes if p[:4] == ["gcloud", "secrets", "versions", "describe"]][:1]
    assert first[4:6] == ["latest", "--secret=chart-img-accounts"]


def test_with_accounts_file_the_secret_is_made_from_it_and_read_back(tmp_path: Path) -> None:
    accounts = tmp_path / "chart-img.accounts.json"
    accounts.write_text('[{"id": "acc1", "apiKey": "k-not-a-real-key-1"}]')
    run = dry_run(tmp_path, ACCOUNTS_FILE=str(accounts))
    assert flag(run.one("gcloud", "secrets", "create", "chart-img-accounts"), "data-file") == str(accounts)
    read_back = [p for p in run.probes if p[:4] == ["gcloud", "secrets", "versions", "access"]]
    assert [p[4] for p in read_back] == [SECRET_PLACEHOLDER]
    assert "does not hold ACCOUNTS_FILE's bytes" in "\n".join(run.notes)


def test_a_relative_accounts_file_is_the_one_beside_the_caller(tmp_path: Path) -> None:
    # deploy.sh runs its commands from the checkout's root: the path must not follow it there
    (tmp_path / "chart-img.accounts.json").write_text('[{"id": "acc1", "apiKey": "k-not-a-real-key-1"}]')
    run = dry_run(tmp_path, cwd=tmp_path, ACCOUNTS_FILE="chart-img.accounts.json")
    create = run.one("gcloud", "secrets", "create", "chart-img-accounts")
    assert flag(create, "data-file") == str(tmp_path / "chart-img.accounts.json")


def test_the_rules_release_is_shown_with_the_file_it_releases(sample: DryRun) -> None:
    curls = [program(c) for c in sample.commands if program(c)[0] == "curl"]
    ruleset, release = curls
    assert (flag_after(ruleset, "--request"), ruleset[-1]) == ("POST", f"{RULES_API}/rulesets")
    body = json.loads(flag_after(ruleset, "--data-binary") or "")
    assert body == {"source": {"files": [{"name": "firestore.rules", "content": RULES.read_text()}]}}
    assert (flag_after(release, "--request"), release[-1]) == ("POST", f"{RULES_API}/releases")
    assert json.loads(flag_after(release, "--data-binary") or "") == {
        "name": "projects/acme-charts/releases/cloud.firestore",
        "rulesetName": "<name of the ruleset just created>",
    }
    for call in curls:  # the token is a placeholder here; a real run sends it on stdin
        assert "Authorization: Bearer <gcloud auth print-access-token>" in call
        assert "x-goog-user-project: acme-charts" in call
    [lookup] = [p for p in sample.probes if p[0] == "curl"]
    assert lookup[-1] == f"{RULES_API}/releases/cloud.firestore"


def test_the_three_services_take_internal_traffic_only(sample: DryRun) -> None:
    deploys = sample.find("gcloud", "run", "deploy")
    assert [flag(d, "ingress") for d in deploys] == ["internal"] * 3


def test_a_given_secret_version_is_the_one_mounted_and_read_back(tmp_path: Path) -> None:
    run = dry_run(tmp_path, SECRET_VERSION="4")
    worker = run.one("gcloud", "run", "deploy", "worker-chart-export")
    assert flag(worker, "set-secrets") == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:4"
    assert [p[4] for p in run.probes if p[:4] == ["gcloud", "secrets", "versions", "describe"]] == ["4", "4"]
    assert run.config["SECRET_VERSION"] == "4"


def test_a_private_bucket_has_no_public_binding_and_prevention_enforced(tmp_path: Path) -> None:
    run = dry_run(tmp_path, PUBLIC_READ="false")
    create = run.one("gcloud", "storage", "buckets", "create", "gs://acme-charts-public")
    assert "--public-access-prevention" in create and "--no-public-access-prevention" not in create
    members = {flag(c, "member") for c in run.find("gcloud", "storage", "buckets", "add-iam-policy-binding")}
    assert members == {"serviceAccount:worker-chart-export@acme-charts.iam.gserviceaccount.com"}
    assert run.config["PUBLIC_READ"] == "false"


def test_the_plan_reaches_the_worker_and_the_templates_check(tmp_path: Path) -> None:
    run = dry_run(tmp_path, CHART_IMG_PLAN="PRO")
    worker = run.one("gcloud", "run", "deploy", "worker-chart-export")
    assert "CHART_IMG_PLAN=PRO" in (flag(worker, "set-env-vars") or "").split(",")
    [sync] = [c for c in run.commands if "templates" in c]
    assert "CHART_IMG_PLAN=PRO" in sync[: sync.index("templates")]


def refused(**overrides: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], **SAMPLE, **overrides}
    return subprocess.run(
        ["bash", str(DEPLOY), "--dry-run"], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"PUBLIC_READ": "no"}, "PUBLIC_READ must be true or false (contract §13.6: true), got 'no'"),
        (
            {"CHART_IMG_PLAN": "FREE"},
            "CHART_IMG_PLAN must be BASIC, PRO, MEGA, ULTRA or ENTERPRISE, got 'FREE'",
        ),
        (
            {"SECRET_VERSION": "latest"},
            "SECRET_VERSION must be a version number of chart-img-accounts, got 'latest'",
        ),
        ({"IAM_RETRY_DELAYS": "5,10"}, "IAM_RETRY_DELAYS must be seconds separated by spaces, got '5,10'"),
    ],
)
def test_new_knobs_are_checked_before_any_command(overrides: dict[str, str], message: str) -> None:
    result = refused(**overrides)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"deploy.sh: {message}"]


def test_every_configuration_problem_is_reported_at_once_the_accounts_file_too(tmp_path: Path) -> None:
    accounts = tmp_path / "chart-img.accounts.json"
    accounts.write_text('[{"id": "acc1"}]')
    result = refused(REQUEST_TIMEOUT_SECONDS="900", ACCOUNTS_FILE=str(accounts), SECRET_VERSION="2")
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.splitlines()
    assert [line.split(" ")[1] for line in lines] == [
        "REQUEST_TIMEOUT_SECONDS",
        "SECRET_VERSION",
        "ACCOUNTS_FILE",
    ]
    assert lines[2] == f"deploy.sh: ACCOUNTS_FILE {accounts}: item 1: missing 'apiKey'"


# --- TradingView sessions (issue 40): their own secret, checked, read back, mounted ----------

SESSIONS_SECRET = "chart-img-tradingview-sessions"


def test_a_sessions_version_is_checked_before_any_command() -> None:
    result = refused(SESSIONS_SECRET_VERSION="latest")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"deploy.sh: SESSIONS_SECRET_VERSION must be a version number of {SESSIONS_SECRET}, got 'latest'"
    ]


def test_a_dry_run_with_sessions_says_it_makes_the_secret_reads_it_back_and_mounts_it(tmp_path: Path) -> None:
    sessions = tmp_path / "tv.sessions.json"
    sessions.write_text(
        json.dumps([{"id": "mine", "sessionId": "tv-sid-not-real", "sessionIdSign": "tv-sign-not-real"}])
    )
    run = dry_run(tmp_path, SESSIONS_FILE=str(sessions))
    assert flag(run.one("gcloud", "secrets", "create", SESSIONS_SECRET), "data-file") == str(sessions)
    assert [p[4:6] for p in run.probes if p[:4] == ["gcloud", "secrets", "versions", "access"]][-1] == [
        f"<latest version of {SESSIONS_SECRET}, read back below>",
        f"--secret={SESSIONS_SECRET}",
    ]
    worker = run.one("gcloud", "run", "deploy", run.config["SERVICE"])
    assert (flag(worker, "set-secrets") or "").endswith(
        f",CHART_IMG_SESSIONS_JSON={SESSIONS_SECRET}:<latest version of {SESSIONS_SECRET}, read back below>"
    )
