"""deploy.sh for real when the world is unlucky: no login, no Application Default Credentials,
an organisation that forbids allUsers, IAM still propagating in a new project, a secret version
disabled or holding what the worker refuses, a roll-back to an older version. Every gcloud call
is judged by the installed CLI; without credentials its answers are the CLI's own words."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from deploy_sandbox import ACCOUNTS, Deploy, Sandbox
from gcloud_cli import GcloudJudge
from test_deploy_real_cli import mounted_secret, ran_through

BUCKET = "bucket:acme-charts-public"
READ_ONLY_PREFLIGHT = [
    "version",
    "alpha monitoring policies list",
    "auth print-access-token",
    "auth application-default print-access-token",
]


def public_roles(deploy: Deploy) -> set[str]:
    return {role for role, member in deploy.bindings(BUCKET) if member == "allUsers"}


def test_without_any_credential_it_stops_at_the_preflight_naming_both_logins(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    deploy = Sandbox(tmp_path, judge.socket_path).deploy(FAKE_GCLOUD_CREDENTIALS="none")
    assert deploy.code == 1 and deploy.rejections == []
    assert deploy.stderr.splitlines() == [
        "deploy.sh: gcloud has no usable login: run 'gcloud auth login' "
        "(gcloud: You do not currently have an active account selected.)",
        "deploy.sh: no Application Default Credentials, which templates sync (the last step) writes "
        "Firestore with: run 'gcloud auth application-default login' (gcloud: Your default credentials "
        "were not found. To set up Application Default Credentials, see "
        "https://cloud.google.com/docs/authentication/external/set-up-adc for more information.)",
        "deploy.sh: stopped before changing anything",
    ]
    assert [" ".join(c[:5]) for c in deploy.calls] == [
        'version --format=value("Google Cloud SDK")',
        "alpha monitoring policies list --help",
        "auth print-access-token",
        "auth application-default print-access-token",
    ]
    assert deploy.state["resources"] == {} and deploy.rules_calls == []


def test_a_login_without_application_default_credentials_stops_before_any_change(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    deploy = Sandbox(tmp_path, judge.socket_path).deploy(FAKE_GCLOUD_CREDENTIALS="no-adc")
    assert deploy.code == 1 and deploy.rejections == []
    [problem, stopped] = deploy.stderr.splitlines()
    assert "run 'gcloud auth application-default login'" in problem
    assert stopped == "deploy.sh: stopped before changing anything"
    # the login itself works: the project is read, then Cloud Run's regions asked
    assert [c[:3] for c in deploy.calls[-2:]] == [
        ["projects", "describe", "acme-charts"],
        ["run", "regions", "list"],
    ]
    assert deploy.state["resources"] == {}


def test_a_public_bucket_made_private_loses_its_public_binding(
    first: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = first[0].copy(tmp_path)
    assert public_roles(first[1]) == {"roles/storage.legacyObjectReader"}
    again = sandbox.deploy(PUBLIC_READ="false")
    ran_through(again)
    assert again.find("storage", "buckets", "update") == [
        ["storage", "buckets", "update", "gs://acme-charts-public", "--public-access-prevention"]
    ]
    assert public_roles(again) == set()
    assert again.resource("bucket", "acme-charts-public")["public_access_prevention"] == "enforced"


def test_an_organisation_forbidding_all_users_is_told_to_deploy_private(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    (sandbox.state / "state.json").write_text(
        json.dumps({"resources": {}, "iam": {}, "counter": 0, "org_policy_forbids_all_users": True})
    )
    public = sandbox.deploy()
    assert public.code == 1 and public.rejections == []
    assert "do not belong to a permitted customer" in public.stderr
    assert "deploy with PUBLIC_READ=false" in public.stderr.splitlines()[-1]
    assert public.find("run", "deploy") == []  # stopped at the bucket
    private = sandbox.deploy(PUBLIC_READ="false")  # and carries on from there
    ran_through(private)
    assert private.resource("bucket", "acme-charts-public")["public_access_prevention"] == "enforced"
    runtime = "serviceAccount:worker-chart-export@acme-charts.iam.gserviceaccount.com"
    assert private.bindings(BUCKET) == {("roles/storage.objectUser", runtime)}  # nobody else


def settling(sandbox: Sandbox, refusals: int) -> None:
    """A new project whose IAM does not see new service accounts yet, for `refusals` grants."""
    (sandbox.state / "state.json").write_text(
        json.dumps({"resources": {}, "iam": {}, "counter": 0, "iam_settling": refusals})
    )


def test_grants_refused_while_iam_propagates_are_tried_again(judge: GcloudJudge, tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    settling(sandbox, 2)
    deploy = sandbox.deploy(IAM_RETRY_DELAYS="0 0 0")
    ran_through(deploy)
    retries = [line for line in deploy.stderr.splitlines() if "trying again" in line]
    assert retries == [
        "deploy.sh: refused, as happens while IAM propagates a grant or an account made a moment ago: "
        f"trying again in 0 s ({n} of 3)"
        for n in (1, 2)
    ]
    assert deploy.state["iam_settling"] == 0


def test_iam_slower_than_the_retries_stops_with_what_to_do_and_a_rerun_finishes(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    settling(sandbox, 4)
    stopped = sandbox.deploy(IAM_RETRY_DELAYS="0 0")
    assert stopped.code == 1 and stopped.rejections == []
    assert "Service account worker-chart-export@acme-charts.iam.gserviceaccount.com does not exist" in (
        stopped.stderr
    )
    assert stopped.stderr.splitlines()[-1].startswith(
        "deploy.sh: still refused after 2 more tries. If a role was granted or an account made a moment "
        "ago (a new project), IAM may need a few more minutes: run deploy.sh again"
    )
    again = sandbox.deploy(IAM_RETRY_DELAYS="0 0")  # one refusal left: taken by a retry
    ran_through(again)


def plant_version(sandbox: Sandbox, content: str, *, disabled: bool = False) -> None:
    def change(state: dict[str, object]) -> None:
        versions = state["secret_versions"]["chart-img-accounts"]  # type: ignore[index]
        versions.append(base64.b64encode(content.encode()).decode())
        if disabled:
            state["secret_disabled"] = {"chart-img-accounts": [len(versions)]}

    sandbox.edit_state(change)


def test_a_disabled_latest_version_stops_the_preflight(first: tuple[Sandbox, Deploy], tmp_path: Path) -> None:
    sandbox = first[0].copy(tmp_path)
    plant_version(sandbox, json.dumps(ACCOUNTS), disabled=True)
    deploy = sandbox.deploy(ACCOUNTS_FILE="")
    assert deploy.code == 1 and deploy.rejections == []
    assert deploy.stderr.splitlines()[0] == (
        "deploy.sh: secret chart-img-accounts: version latest is DISABLED, not ENABLED: enable it, or set "
        "ACCOUNTS_FILE to add one"
    )
    assert [c for c in deploy.calls if c[:2] == ["services", "enable"]] == []


def test_a_version_the_worker_would_refuse_is_never_mounted(
    first: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = first[0].copy(tmp_path)
    plant_version(sandbox, '[{"id": "acc1", "apiKey": "k-planted-not-a-real-key"}, {"id": "acc2"}]')
    deploy = sandbox.deploy(ACCOUNTS_FILE="")
    assert deploy.code == 1 and deploy.rejections == []
    assert deploy.stderr.splitlines()[-1] == (
        "deploy.sh: version 2 of secret chart-img-accounts is refused by the worker's accounts parser: "
        "item 2: missing 'apiKey'"
    )
    assert "k-planted-not-a-real-key" not in deploy.stdout + deploy.stderr
    assert deploy.find("run", "deploy") == []  # every service keeps the version it had


def test_secret_version_rolls_the_worker_back_to_an_older_version(
    first: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = first[0].copy(tmp_path)
    plant_version(sandbox, json.dumps([*ACCOUNTS, {"id": "acc3", "apiKey": "k-acc3-not-a-real-key"}]))
    rolled_back = sandbox.deploy(ACCOUNTS_FILE="", SECRET_VERSION="1")
    ran_through(rolled_back)
    assert mounted_secret(rolled_back) == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:1"
    assert [c[3] for c in rolled_back.find("secrets", "versions", "access")] == ["1"]
    assert rolled_back.find("secrets", "versions", "describe")[0][3] == "1"  # the preflight's, too


def test_a_first_deploy_cannot_list_regions_yet_and_says_region_stands_on_its_form(
    first: tuple[Sandbox, Deploy],
) -> None:
    # a new project: Cloud Run's API is enabled by this very deploy, after the preflight
    lines = first[1].stdout.splitlines()
    assert (
        "REGION europe-west1 is checked by its form only: Cloud Run's list of regions could not be read "
        "(gcloud: PERMISSION_DENIED: Cloud Run Admin API has not been used in project 424242424242 before or "
        "it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
        "run.googleapis.com/overview?project=424242424242 then retry.)"
    ) in lines


def test_a_region_cloud_run_does_not_list_stops_a_redeploy_before_any_change(
    first: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = first[0].copy(tmp_path)
    before = json.loads((sandbox.state / "state.json").read_text())
    deploy = sandbox.deploy(REGION="europe-wst1")
    assert deploy.code == 1 and deploy.rejections == []
    assert deploy.stderr.splitlines() == [
        "deploy.sh: REGION: 'europe-wst1' is not a Cloud Run region (Cloud Run's europe-* regions: "
        "europe-central2, europe-north1, europe-north2, europe-southwest1, europe-west1, europe-west10, "
        "europe-west12, europe-west2, europe-west3, europe-west4, europe-west6, europe-west8, europe-west9)",
        "deploy.sh: stopped before changing anything",
    ]
    assert [c for c in deploy.calls if c[:2] == ["services", "enable"]] == []
    assert deploy.state == before  # nothing enabled, created or granted


def test_a_listed_region_is_said_to_be_one_and_the_redeploy_runs_through(redeploy: Deploy) -> None:
    again = redeploy
    ran_through(again)
    assert "REGION europe-west1 is one of Cloud Run's regions" in again.stdout.splitlines()
