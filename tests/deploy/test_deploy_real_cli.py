"""deploy.sh run for real (not --dry-run): every gcloud call judged by the installed Google Cloud
CLI (a rejected one ends the deploy), answered by a fake project that keeps its state, so a
first deploy, a re-deploy, and a re-deploy over an older deployment each run through to
`templates sync` (deploy_sandbox.py, fake_gcloud.py, fake_project.py)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from deploy_sandbox import ACCOUNTS, PROJECT_ID, PROJECT_NUMBER, Deploy, Sandbox
from gcloud_cli import GcloudJudge

from harness.builders import REPO

UPDATED = "google.cloud.firestore.document.v1.updated"
WRITTEN = "google.cloud.firestore.document.v1.written"
WORKER_TRIGGER = "eur3/worker-chart-export-flow-runs"
ADVANCE_TRIGGER = "eur3/worker-chart-export-advance-flow-trigger"
TRIGGER_SA = f"worker-chart-export-trigger@{PROJECT_ID}.iam.gserviceaccount.com"
HOLD = "worker-chart-export-dead-letter-hold"
DEAD_LETTER = f"projects/{PROJECT_ID}/topics/worker-chart-export-dead-letter"
PUBSUB_AGENT = f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
MONITORING = REPO / "deploy" / "monitoring"
DASHBOARD = f"projects/{PROJECT_ID}/dashboards/worker-chart-export"
RULES = REPO / "deploy" / "firestore.rules"
RELEASE = f"projects/{PROJECT_ID}/releases/cloud.firestore"


def ran_through(deploy: Deploy) -> None:
    assert deploy.rejections == [], deploy.rejections
    assert deploy.code == 0, deploy.stderr[-3000:]
    assert deploy.templates_syncs == [
        f"templates sync --dir chart-templates|project={PROJECT_ID}|emulator=|plan=BASIC"
    ]


def released_rules(deploy: Deploy) -> str:
    """The rules file the project's cloud.firestore release holds."""
    rules = deploy.state["rules"]
    [released] = rules["rulesets"][rules["releases"][RELEASE]["rulesetName"]]["source"]["files"]
    return str(released["content"])


def mounted_secret(deploy: Deploy) -> str:
    worker = next(c for c in deploy.find("run", "deploy") if c[2] == "worker-chart-export")
    return next(a for a in worker if a.startswith("--set-secrets=")).removeprefix("--set-secrets=")


def trigger_type(trigger: dict[str, Any]) -> str:
    [event_type] = [f["value"] for f in trigger["eventFilters"] if f["attribute"] == "type"]
    return str(event_type)


def subscription_of(deploy: Deploy, trigger: str) -> dict[str, Any]:
    name = deploy.resource("trigger", trigger)["transport"]["pubsub"]["subscription"]
    return deploy.resource("subscription", name.rsplit("/", 1)[1])


def test_first_deploy_runs_through_with_every_call_accepted(first: tuple[Sandbox, Deploy]) -> None:
    _, deploy = first
    ran_through(deploy)
    assert deploy.find("firestore", "databases", "create")
    # alert policies only exist in the alpha track; dashboards are GA
    assert {c[1] for c in deploy.find("monitoring")} == {"dashboards"}


def test_first_deploy_makes_the_database_and_both_triggers(first: tuple[Sandbox, Deploy]) -> None:
    _, deploy = first
    database = deploy.resource("database", "(default)")
    assert (database["type"], database["locationId"]) == ("FIRESTORE_NATIVE", "eur3")
    worker, advance = deploy.resource("trigger", WORKER_TRIGGER), deploy.resource("trigger", ADVANCE_TRIGGER)
    # advance_flow takes every write (a creation makes the first steps READY); the worker, updates
    assert (trigger_type(worker), trigger_type(advance)) == (UPDATED, WRITTEN)
    for trigger, service in ((worker, "worker-chart-export"), (advance, "worker-chart-export-advance-flow")):
        assert trigger["destination"]["cloudRun"] == {"service": service, "region": "europe-west1"}
        assert trigger["eventDataContentType"] == "application/protobuf"
        assert trigger["serviceAccount"] == TRIGGER_SA
        assert {"attribute": "document", "operator": "match-path-pattern", "value": "flow_runs/{runId}"} in (
            trigger["eventFilters"]
        )


def test_each_trigger_subscription_acks_after_its_request_timeout_and_dead_letters(
    first: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = first
    for trigger, timeout in ((WORKER_TRIGGER, 300), (ADVANCE_TRIGGER, 60)):
        subscription = subscription_of(deploy, trigger)
        assert subscription["ackDeadlineSeconds"] == timeout
        assert subscription["deadLetterPolicy"] == {"deadLetterTopic": DEAD_LETTER, "maxDeliveryAttempts": 20}
        assert ("roles/pubsub.subscriber", PUBSUB_AGENT) in deploy.bindings(
            "subscription:" + subscription["name"].rsplit("/", 1)[1]
        )


def test_the_bucket_name_loses_its_scheme_and_anyone_reads_without_listing(
    first: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = first  # CHARTS_BUCKET=gs://acme-charts-public
    assert list(deploy.state["resources"]["bucket"]) == ["acme-charts-public"]
    public = {role for role, member in deploy.bindings("bucket:acme-charts-public") if member == "allUsers"}
    assert public == {"roles/storage.legacyObjectReader"}
    worker = next(c for c in deploy.find("run", "deploy") if c[2] == "worker-chart-export")
    assert "CHARTS_BUCKET=acme-charts-public," in next(a for a in worker if a.startswith("--set-env-vars="))


def test_the_secret_holds_the_accounts_file(first: tuple[Sandbox, Deploy]) -> None:
    _, deploy = first
    [version] = deploy.state["secret_versions"]["chart-img-accounts"]
    assert json.loads(base64.b64decode(version)) == ACCOUNTS


def test_the_worker_mounts_the_version_read_back_and_every_service_is_internal(
    first: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = first
    assert mounted_secret(deploy) == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:1"  # not `latest`
    read_back = deploy.find("secrets", "versions", "access")
    assert [c[3] for c in read_back] == ["1"]
    assert "secret chart-img-accounts: version 1 read back" in deploy.stdout
    assert [c for c in deploy.find("run", "deploy") if "--ingress=internal" not in c] == []


def test_first_deploy_releases_the_rules_that_close_firestore_to_clients(
    first: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = first
    assert released_rules(deploy) == RULES.read_text()
    assert [c["method"].rsplit(".", 2)[1:] for c in deploy.rules_calls] == [
        ["releases", "get"],
        ["rulesets", "create"],
        ["releases", "create"],
    ]
    assert not any(c["token_on_command_line"] for c in deploy.rules_calls)  # on stdin only
    # before any service that could write to Firestore exists
    enable = next(i for i, c in enumerate(deploy.calls) if c[:2] == ["services", "enable"])
    assert "firebaserules.googleapis.com" in deploy.calls[enable]


def test_alert_policies_come_from_the_files_the_dead_letter_one_on_the_hold_subscription(
    first: tuple[Sandbox, Deploy],
) -> None:
    _, deploy = first
    policies = {p["displayName"]: p for p in deploy.state["resources"]["policy"].values()}
    files = sorted(MONITORING.glob("*.policy.json"))
    assert len(policies) == len(files) == 3
    for path in files:
        expected = json.loads(path.read_text().replace("${DEAD_LETTER_HOLD}", HOLD))
        stored = dict(policies[expected["displayName"]])
        stored.pop("name")
        assert stored == expected
    backlog = policies["worker-chart-export: events in the dead-letter hold subscription"]
    condition = backlog["conditions"][0]["conditionThreshold"]
    assert 'metric.type="pubsub.googleapis.com/subscription/num_undelivered_messages"' in condition["filter"]
    assert f'resource.labels.subscription_id="{HOLD}"' in condition["filter"]
    assert (condition["comparison"], condition["thresholdValue"]) == ("COMPARISON_GT", 0)


def wanted_dashboard() -> dict[str, Any]:
    """The dashboard file as deploy.sh names it for the sample project."""
    text = (MONITORING / "worker-chart-export.dashboard.json").read_text()
    return dict(
        json.loads(
            text.replace("${PROJECT_ID}", PROJECT_ID).replace("${DASHBOARD_ID}", "worker-chart-export")
        )
    )


def test_first_deploy_creates_the_dashboard_from_its_file(first: tuple[Sandbox, Deploy]) -> None:
    _, deploy = first
    [(name, stored)] = deploy.state["resources"]["dashboard"].items()
    assert name == DASHBOARD == wanted_dashboard()["name"]
    dashboard = dict(stored)
    assert dashboard.pop("etag")  # the API's, not the file's
    assert dashboard == wanted_dashboard()
    [describe] = deploy.find("monitoring", "dashboards", "describe")
    assert describe[3] == "worker-chart-export"
    assert len(deploy.find("monitoring", "dashboards", "create")) == 1
    assert deploy.find("monitoring", "dashboards", "update") == []


def without_etags(state: dict[str, Any]) -> dict[str, Any]:
    """The state but what every write changes: the dashboard's etag, the fake's id counter."""
    state = copy.deepcopy(state)
    state.pop("counter")
    for dashboard in state["resources"].get("dashboard", {}).values():
        dashboard.pop("etag")
    return state


def test_a_redeploy_changes_nothing_that_is_right(first: tuple[Sandbox, Deploy], redeploy: Deploy) -> None:
    before, again = first[1].state, redeploy
    ran_through(again)
    assert without_etags(again.state) == without_etags(before)
    # the dashboard is replaced from the file, on the version just read (its etag)
    [update] = again.find("monitoring", "dashboards", "update")
    assert update[3] == "worker-chart-export"
    assert (
        again.resource("dashboard", DASHBOARD)["etag"] != before["resources"]["dashboard"][DASHBOARD]["etag"]
    )
    verbs = {"create", "delete", "remove-iam-policy-binding"}
    assert [c for c in again.calls if verbs & set(c)] == []
    assert again.find("eventarc", "triggers", "update") == []
    assert again.find("pubsub", "subscriptions", "update") == []
    assert again.find("secrets", "versions", "add") == []  # the same accounts file: no new version
    assert mounted_secret(again) == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:1"
    # the release already holds the file: read, compared, left alone (no new ruleset)
    assert [c["method"].rsplit(".", 2)[1:] for c in again.rules_calls] == [
        ["releases", "get"],
        ["rulesets", "get"],
    ]
    assert len(again.find("alpha", "monitoring", "policies", "update")) == 3
    assert "trigger worker-chart-export-flow-runs: as wanted" in again.stdout


def older_deployment(state: dict[str, Any]) -> None:
    """What an earlier deploy.sh left: advance_flow on `updated`, a JSON-encoded worker trigger,
    subscriptions at Pub/Sub's default deadline, a listable bucket."""
    triggers = state["resources"]["trigger"]
    for f in triggers[ADVANCE_TRIGGER]["eventFilters"]:
        if f["attribute"] == "type":
            f["value"] = UPDATED
    triggers[WORKER_TRIGGER]["eventDataContentType"] = "application/json"
    for subscription in state["resources"]["subscription"].values():
        subscription["ackDeadlineSeconds"] = 10
    state["iam"]["bucket:acme-charts-public"].append(["roles/storage.objectViewer", "allUsers"])
    dashboard = state["resources"]["dashboard"][DASHBOARD]
    dashboard["displayName"] = "edited by hand"
    dashboard["mosaicLayout"]["tiles"].pop()
    # test-mode rules, open to every client, released by someone else
    open_rules = (
        "rules_version = '2';\nservice cloud.firestore {\n"
        "  match /{document=**} { allow read, write: if true; }\n}\n"
    )
    ruleset = f"projects/{PROJECT_ID}/rulesets/test-mode"
    state["rules"]["rulesets"][ruleset] = {
        "name": ruleset,
        "source": {"files": [{"name": "firestore.rules", "content": open_rules}]},
    }
    state["rules"]["releases"][RELEASE]["rulesetName"] = ruleset


def test_a_redeploy_over_an_older_deployment_brings_it_to_what_is_wanted(
    first: tuple[Sandbox, Deploy], tmp_path: Path
) -> None:
    sandbox = first[0].copy(tmp_path)
    sandbox.edit_state(older_deployment)
    rotated = tmp_path / "rotated.json"
    rotated.write_text(json.dumps([*ACCOUNTS, {"id": "acc3", "apiKey": "k-acc3-not-a-real-key"}]))
    channels = f"projects/{PROJECT_ID}/notificationChannels/7"
    again = sandbox.deploy(ACCOUNTS_FILE=str(rotated), NOTIFICATION_CHANNELS=channels)
    ran_through(again)

    # the type cannot be updated in place: delete, then create; the worker's trigger is updated
    advance = [
        c[:4]
        for c in again.find("eventarc", "triggers")
        if c[3] == "worker-chart-export-advance-flow-trigger"
    ]
    assert [c[2] for c in advance] == ["describe", "delete", "create", "describe"]
    assert trigger_type(again.resource("trigger", ADVANCE_TRIGGER)) == WRITTEN
    [update] = again.find("eventarc", "triggers", "update")
    assert update[3] == "worker-chart-export-flow-runs"
    assert again.resource("trigger", WORKER_TRIGGER)["eventDataContentType"] == "application/protobuf"
    for trigger, timeout in ((WORKER_TRIGGER, 300), (ADVANCE_TRIGGER, 60)):
        assert subscription_of(again, trigger)["ackDeadlineSeconds"] == timeout
        assert subscription_of(again, trigger)["deadLetterPolicy"]["deadLetterTopic"] == DEAD_LETTER

    public = {role for role, member in again.bindings("bucket:acme-charts-public") if member == "allUsers"}
    assert public == {"roles/storage.legacyObjectReader"}
    assert len(again.state["secret_versions"]["chart-img-accounts"]) == 2  # rotated: a new version
    assert mounted_secret(again) == "CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:2"  # the new one
    assert released_rules(again) == RULES.read_text()  # closed again
    assert [c["method"].rsplit(".", 2)[1:] for c in again.rules_calls][-2:] == [
        ["rulesets", "create"],
        ["releases", "patch"],
    ]
    assert all(p["notificationChannels"] == [channels] for p in again.state["resources"]["policy"].values())
    dashboard = dict(again.resource("dashboard", DASHBOARD))
    dashboard.pop("etag")
    assert dashboard == wanted_dashboard()  # the file is the truth


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('[{"id": "acc1", "apiKey": "k-1"', "not valid JSON at line 1"),
        ('[{"id": "acc1"}]', "item 1: missing 'apiKey'"),
        (None, "no such file"),
    ],
)
def test_a_bad_accounts_file_stops_before_any_gcloud_call(
    judge: GcloudJudge, tmp_path: Path, content: str | None, problem: str
) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    accounts = tmp_path / "bad.json"
    if content is not None:
        accounts.write_text(content)
    deploy = sandbox.deploy(ACCOUNTS_FILE=str(accounts))
    assert deploy.code == 2
    [line] = deploy.stderr.splitlines()
    assert f"ACCOUNTS_FILE {accounts}" in line and problem in line
    assert deploy.calls == []  # no secrets call, no call at all


def test_without_accounts_file_a_missing_secret_stops_before_any_change(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    deploy = Sandbox(tmp_path, judge.socket_path).deploy(ACCOUNTS_FILE="")
    assert deploy.code == 1 and deploy.rejections == []
    assert deploy.stderr.splitlines() == [
        "deploy.sh: secret chart-img-accounts has no version latest to deploy: set ACCOUNTS_FILE to create "
        "it (gcloud: NOT_FOUND: Resource 'chart-img-accounts' was not found)",
        "deploy.sh: stopped before changing anything",
    ]
    # the preflight's look-ups only: tools, login, ADC, the project, Cloud Run's regions, the secret
    assert [" ".join(c[:3]) for c in deploy.calls] == [
        'version --format=value("Google Cloud SDK")',
        "alpha monitoring policies",
        "auth print-access-token",
        "auth application-default print-access-token",
        "projects describe acme-charts",
        "run regions list",
        "secrets versions describe",
    ]
    assert deploy.state["resources"] == {}


def test_a_database_elsewhere_stops_the_deploy_naming_its_location(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    database = {
        "name": f"projects/{PROJECT_ID}/databases/(default)",
        "locationId": "nam5",
        "type": "FIRESTORE_NATIVE",
    }
    (sandbox.state / "state.json").write_text(
        json.dumps({"resources": {"database": {"(default)": database}}, "iam": {}, "counter": 0})
    )
    deploy = sandbox.deploy()
    assert deploy.code == 1 and deploy.rejections == []
    assert "set FIRESTORE_LOCATION=nam5" in deploy.stderr
    assert list(deploy.state["resources"]) == ["database"]  # nothing else was made
