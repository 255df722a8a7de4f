"""deploy/deploy.sh --dry-run for sample configurations: the commands that matter, with the flags
that matter, and nothing run. Lines starting with `? ` are read-only look-ups; `#` lines are
section titles and the places a real run would stop; every other line is one command that
changes something, shell-quoted."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.builders import REPO
from worker_chart_export.core.naming import LEASE_EXPIRY_FIELD, STEP_LEASES_COLLECTION

DEPLOY = REPO / "deploy" / "deploy.sh"
SAMPLE = {
    "PROJECT_ID": "acme-charts",
    "REGION": "europe-west1",
    "FIRESTORE_LOCATION": "eur3",
    "CHARTS_BUCKET": "acme-charts-public",
    "IMAGE_TAG": "abc1234",
    "PROJECT_NUMBER": "123456789",
}
RUNTIME_SA = "worker-chart-export@acme-charts.iam.gserviceaccount.com"
FLOW_SA = "worker-chart-export-flow@acme-charts.iam.gserviceaccount.com"
TRIGGER_SA = "serviceAccount:worker-chart-export-trigger@acme-charts.iam.gserviceaccount.com"
SCHEDULER_SA = "worker-chart-export-scheduler@acme-charts.iam.gserviceaccount.com"
PUBSUB_AGENT = "serviceAccount:service-123456789@gcp-sa-pubsub.iam.gserviceaccount.com"


@dataclass
class DryRun:
    commands: list[list[str]]
    probes: list[list[str]]
    config: dict[str, str]
    notes: list[str]

    def find(self, *prefix: str) -> list[list[str]]:
        return [c for c in self.commands if c[: len(prefix)] == list(prefix)]

    def one(self, *prefix: str, **flags: str) -> list[str]:
        found = [c for c in self.find(*prefix) if all(flag(c, k) == v for k, v in flags.items())]
        assert len(found) == 1, (prefix, flags, found)
        return found[0]


def flag(command: list[str], name: str) -> str | None:
    """The value of --name=value (last one wins, as in gcloud); None if absent."""
    name = name.replace("_", "-")
    values = [a.split("=", 1)[1] for a in command if a.startswith(f"--{name}=")]
    return values[-1] if values else None


def flags(command: list[str], name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in command if a.startswith(f"--{name}=")]


def program(command: list[str]) -> list[str]:
    """The command `env [-u NAME]... [NAME=value]... program args` runs."""
    if command[0] != "env":
        return command
    rest = command[1:]
    while rest and (rest[0] == "-u" or "=" in rest[0]):
        rest = rest[2:] if rest[0] == "-u" else rest[1:]
    return rest


def env_pairs(value: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in value.split(","))


def dry_run(tmp_path: Path, cwd: Path | None = None, **overrides: str) -> DryRun:
    # Real cloud tools on PATH would be a disaster in a dry run: these record any call.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    calls = tmp_path / "calls.log"
    for tool in ("gcloud", "gsutil", "bq", "docker", "curl"):
        script = fake_bin / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        script.chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "HOME": str(tmp_path), **SAMPLE, **overrides}
    result = subprocess.run(
        ["bash", str(DEPLOY), "--dry-run"], capture_output=True, text=True, env=env, timeout=60, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    # nothing ran but the one question a dry run asks first: has gcloud a login (here: none)
    assert calls.read_text().splitlines() == ["gcloud auth print-access-token"]
    printed = subprocess.run(
        ["bash", str(DEPLOY), "--print-config"], capture_output=True, text=True, env=env, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    # NAME=value lines, shell-quoted so that the output can be sourced
    config = dict(shlex.split(line)[0].split("=", 1) for line in printed.stdout.splitlines())
    commands, probes, notes = [], [], []
    for line in result.stdout.splitlines():
        if line.startswith("#"):
            notes.append(line)
        elif line.startswith("? "):
            probes.append(shlex.split(line[2:]))
        elif line.strip():
            commands.append(shlex.split(line))
    return DryRun(commands, probes, config, notes)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run(tmp_path_factory.mktemp("dry"))


def test_every_command_is_a_cloud_cli_command_and_the_order_builds_before_use(sample: DryRun) -> None:
    tools = {Path(program(c)[0]).name for c in sample.commands}
    assert tools == {"gcloud", "worker-chart-export", "curl"}  # curl: the Firebase Rules API
    order = [" ".join(c[:3]) for c in sample.commands]

    def first(prefix: str) -> int:
        return next(i for i, line in enumerate(order) if line.startswith(prefix))

    assert first("gcloud builds submit") < first("gcloud run deploy")
    assert first("gcloud run deploy") < first("gcloud eventarc triggers")
    assert first("gcloud eventarc triggers") < first("gcloud pubsub subscriptions")
    assert first("gcloud firestore databases") < first("gcloud eventarc triggers")
    # closed to clients as soon as the database exists, before anything that writes to it runs
    assert first("gcloud firestore databases") < first("curl") < first("gcloud run deploy")
    assert first("gcloud logging metrics") < first("gcloud alpha monitoring")
    # GA gcloud has no `monitoring policies` (alpha has): only the dashboard is GA
    assert {c[2] for c in sample.find("gcloud", "monitoring")} == {"dashboards"}
    assert not sample.find("gcloud", "config")  # the project comes from CLOUDSDK_CORE_PROJECT


def test_triggers_are_firestore_triggers_in_the_database_location(sample: DryRun) -> None:
    # the worker acts on updates; advance_flow on every write (a creation makes steps READY)
    for trigger, service, event_type in [
        ("worker-chart-export-flow-runs", "worker-chart-export", "updated"),
        ("worker-chart-export-advance-flow-trigger", "worker-chart-export-advance-flow", "written"),
    ]:
        create = sample.one("gcloud", "eventarc", "triggers", "create", trigger)
        assert flag(create, "location") == "eur3"  # the database's location, not REGION
        assert flag(create, "destination-run-service") == service
        assert flag(create, "destination-run-region") == "europe-west1"
        assert sorted(flags(create, "event-filters")) == [
            "database=(default)",
            f"type=google.cloud.firestore.document.v1.{event_type}",
        ]
        assert flag(create, "event-filters-path-pattern") == "document=flow_runs/{runId}"
        assert flag(create, "event-data-content-type") == "application/protobuf"
        assert "serviceAccount:" + flag(create, "service-account") == TRIGGER_SA  # type: ignore[operator]


def test_trigger_account_has_event_receiver_and_invoker_on_its_services_only(sample: DryRun) -> None:
    project_roles = {
        flag(c, "role")
        for c in sample.find("gcloud", "projects", "add-iam-policy-binding")
        if flag(c, "member") == TRIGGER_SA
    }
    assert project_roles == {"roles/eventarc.eventReceiver"}
    invoked = {
        c[4]
        for c in sample.find("gcloud", "run", "services", "add-iam-policy-binding")
        if flag(c, "member") == TRIGGER_SA
    }
    assert invoked == {"worker-chart-export", "worker-chart-export-advance-flow"}
    bindings = sample.find("gcloud", "run", "services", "add-iam-policy-binding")
    assert all(flag(c, "role") == "roles/run.invoker" for c in bindings)


def test_worker_service_flags(sample: DryRun) -> None:
    deploy = sample.one("gcloud", "run", "deploy", "worker-chart-export")
    env = env_pairs(flag(deploy, "set-env-vars") or "")
    # One budget source: Cloud Run's timeout is the worker's REQUEST_TIMEOUT_SECONDS.
    budget_source = sample.config["REQUEST_TIMEOUT_SECONDS"]
    assert flag(deploy, "timeout") == env["REQUEST_TIMEOUT_SECONDS"] == budget_source
    assert int(env["FINALIZE_BUDGET_SECONDS"]) < int(env["REQUEST_TIMEOUT_SECONDS"])
    assert flag(deploy, "concurrency") == env["THREADS"] == "4"
    assert flag(deploy, "max-instances") == "5"
    # the version read back by this deploy, never `latest` (known at run time: a placeholder)
    pinned = "<latest version of chart-img-accounts, read back below>"
    secret = f"CHART_IMG_ACCOUNTS_JSON=chart-img-accounts:{pinned}"
    assert flag(deploy, "set-secrets") == secret
    assert flag(deploy, "ingress") == "internal"
    assert "CHART_IMG_ACCOUNTS_JSON" not in env  # only ever from the secret
    assert "--no-allow-unauthenticated" in deploy
    assert "--cpu-boost" in deploy and flag(deploy, "execution-environment") == "gen2"
    assert flag(deploy, "service-account") == RUNTIME_SA
    assert env["CHARTS_API_MODE"] == "real" and env["CHARTS_BUCKET"] == "acme-charts-public"
    registry = "europe-west1-docker.pkg.dev/acme-charts/containers"
    assert flag(deploy, "image") == f"{registry}/worker-chart-export:abc1234"


def test_no_service_is_public(sample: DryRun) -> None:
    deploys = sample.find("gcloud", "run", "deploy")
    assert len(deploys) == 3
    assert all("--no-allow-unauthenticated" in d and "--allow-unauthenticated" not in d for d in deploys)
    members = [flag(c, "member") for c in sample.find("gcloud", "run", "services", "add-iam-policy-binding")]
    assert "allUsers" not in members and "allAuthenticatedUsers" not in members


def test_bucket_is_uniform_and_public_read(sample: DryRun) -> None:
    create = sample.one("gcloud", "storage", "buckets", "create", "gs://acme-charts-public")
    assert "--uniform-bucket-level-access" in create and "--no-public-access-prevention" in create
    bindings = {
        (flag(c, "member"), flag(c, "role"))
        for c in sample.find(
            "gcloud", "storage", "buckets", "add-iam-policy-binding", "gs://acme-charts-public"
        )
    }
    assert bindings == {
        ("allUsers", "roles/storage.legacyObjectReader"),  # get, not list
        (f"serviceAccount:{RUNTIME_SA}", "roles/storage.objectUser"),
    }


def test_least_privilege_no_project_wide_storage_or_broad_role(sample: DryRun) -> None:
    project_roles = {
        (flag(c, "member"), flag(c, "role"))
        for c in sample.find("gcloud", "projects", "add-iam-policy-binding")
    }
    assert project_roles == {
        (f"serviceAccount:{RUNTIME_SA}", "roles/datastore.user"),
        (f"serviceAccount:{FLOW_SA}", "roles/datastore.user"),
        (TRIGGER_SA, "roles/eventarc.eventReceiver"),
    }
    every_role = {flag(c, "role") for c in sample.commands if flag(c, "role")}
    assert not {r for r in every_role if r in ("roles/owner", "roles/editor", "roles/run.admin")}
    secret = sample.one("gcloud", "secrets", "add-iam-policy-binding", "chart-img-accounts")
    assert flag(secret, "role") == "roles/secretmanager.secretAccessor"


def test_dead_letter_topic_on_both_trigger_subscriptions(sample: DryRun) -> None:
    sample.one("gcloud", "pubsub", "topics", "create", "worker-chart-export-dead-letter")
    updates = sample.find("gcloud", "pubsub", "subscriptions", "update")
    assert [u[4] for u in updates] == [
        "<subscription of worker-chart-export-flow-runs>",
        "<subscription of worker-chart-export-advance-flow-trigger>",
    ]
    for update in updates:
        assert flag(update, "dead-letter-topic") == "worker-chart-export-dead-letter"
        assert 5 <= int(flag(update, "max-delivery-attempts") or 0) <= 100
    # The subscription names come from the triggers themselves.
    lookups = [c for c in sample.probes if c[:4] == ["gcloud", "eventarc", "triggers", "describe"]]
    assert [flag(c, "format") for c in lookups if "--flatten=eventFilters" not in c] == [
        "value(transport.pubsub.subscription)"
    ] * 2
    # Pub/Sub's own agent must be able to publish dead letters and acknowledge the originals.
    publish = sample.one(
        "gcloud", "pubsub", "topics", "add-iam-policy-binding", "worker-chart-export-dead-letter"
    )
    assert (flag(publish, "member"), flag(publish, "role")) == (PUBSUB_AGENT, "roles/pubsub.publisher")
    subscribers = sample.find("gcloud", "pubsub", "subscriptions", "add-iam-policy-binding")
    assert {(c[4], flag(c, "member"), flag(c, "role")) for c in subscribers} == {
        (u[4], PUBSUB_AGENT, "roles/pubsub.subscriber") for u in updates
    }


def test_pubsub_agent_may_mint_the_trigger_identity(sample: DryRun) -> None:
    grant = sample.one("gcloud", "iam", "service-accounts", "add-iam-policy-binding")
    assert grant[4] == TRIGGER_SA.removeprefix("serviceAccount:")
    assert flag(grant, "member") == PUBSUB_AGENT
    assert flag(grant, "role") == "roles/iam.serviceAccountTokenCreator"


def test_project_number_is_looked_up_when_not_given(tmp_path: Path) -> None:
    run = dry_run(tmp_path, PROJECT_NUMBER="")
    assert ["gcloud", "projects", "describe", "acme-charts", "--format=value(projectNumber)"] in run.probes
    grant = run.one("gcloud", "iam", "service-accounts", "add-iam-policy-binding")
    agent = "service-<PROJECT_NUMBER>@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert flag(grant, "member") == f"serviceAccount:{agent}"


def test_flow_services_run_the_same_image_with_their_own_target(sample: DryRun) -> None:
    worker = sample.one("gcloud", "run", "deploy", "worker-chart-export")
    for service, target in [
        ("worker-chart-export-advance-flow", "advance_flow"),
        ("worker-chart-export-reaper", "reap_expired_leases"),
    ]:
        deploy = sample.one("gcloud", "run", "deploy", service)
        assert flag(deploy, "image") == flag(worker, "image")
        assert flag(deploy, "command") == "worker-chart-export"
        assert flag(deploy, "args") == f"serve,--target={target}"
        assert flag(deploy, "service-account") == FLOW_SA
        assert flag(deploy, "set-secrets") is None  # no CHART-IMG keys outside the worker


def test_reaper_is_called_by_scheduler_with_oidc_and_nobody_else(sample: DryRun) -> None:
    job = sample.one("gcloud", "scheduler", "jobs", "create", "http", "worker-chart-export-reaper")
    url = "<url of worker-chart-export-reaper>"
    assert flag(job, "uri") == url and flag(job, "oidc-token-audience") == url
    assert flag(job, "oidc-service-account-email") == SCHEDULER_SA
    assert flag(job, "http-method") == "POST" and flag(job, "schedule") == "* * * * *"
    invokers = {
        (c[4], flag(c, "member"))
        for c in sample.find("gcloud", "run", "services", "add-iam-policy-binding")
        if c[4] == "worker-chart-export-reaper" or flag(c, "member") == f"serviceAccount:{SCHEDULER_SA}"
    }
    assert invokers == {("worker-chart-export-reaper", f"serviceAccount:{SCHEDULER_SA}")}


def test_reaper_index_matches_the_shipped_index_definition(sample: DryRun) -> None:
    shipped = json.loads((REPO / "deploy" / "firestore.indexes.json").read_text())
    [override] = shipped["fieldOverrides"]
    update = sample.one("gcloud", "firestore", "indexes", "fields", "update", override["fieldPath"])
    # the very collection and field the reaper's query uses (adapters/firestore/leases.py)
    assert flag(update, "collection-group") == override["collectionGroup"] == STEP_LEASES_COLLECTION
    assert flag(update, "database") == "(default)"
    assert flags(update, "index") == [f"order={i['order']}" for i in override["indexes"]]
    assert override["fieldPath"] == LEASE_EXPIRY_FIELD


def test_metrics_and_policies_come_from_the_monitoring_files(sample: DryRun) -> None:
    created = sample.find("gcloud", "logging", "metrics", "create")
    metric_files = sorted((REPO / "deploy" / "monitoring").glob("*.metric.json"))
    assert [c[4] for c in created] == [f.name.removesuffix(".metric.json") for f in metric_files]
    assert len(created) == 3
    for command in created:
        path = REPO / (flag(command, "config-from-file") or "")
        assert json.loads(path.read_text())["name"] == command[4]
    policies = sample.find("gcloud", "alpha", "monitoring", "policies", "create")
    files = sorted((REPO / "deploy" / "monitoring").glob("*.policy.json"))
    assert sorted(Path(flag(p, "policy-from-file") or "").name for p in policies) == [f.name for f in files]
    listing = ["gcloud", "alpha", "monitoring", "policies", "list"]
    lookups = [p for p in sample.probes if p[:5] == listing and p[5:] != ["--help"]]
    for policy, lookup in zip(policies, lookups, strict=True):
        # the file gcloud reads: the source, or (when it names the hold subscription) the copy
        # with that name filled in, which the dry run keeps for the reader
        cited = REPO / (flag(policy, "policy-from-file") or "")
        source = REPO / "deploy" / "monitoring" / cited.name
        assert json.loads(cited.read_text()) == json.loads(
            source.read_text().replace("${DEAD_LETTER_HOLD}", "worker-chart-export-dead-letter-hold")
        )
        display = json.loads(source.read_text())["displayName"]
        assert flag(lookup, "filter") == f'displayName="{display}"'  # update, not duplicate, on re-run


def test_the_dashboard_is_looked_up_by_its_id_and_created_from_its_file(sample: DryRun) -> None:
    [probe] = [p for p in sample.probes if p[:4] == ["gcloud", "monitoring", "dashboards", "describe"]]
    assert probe[4] == "worker-chart-export" and flag(probe, "format") == "value(etag)"
    [create] = sample.find("gcloud", "monitoring", "dashboards", "create")
    assert Path(flag(create, "config-from-file") or "").name == "worker-chart-export.dashboard.json"
    order = [" ".join(c[:4]) for c in sample.commands]
    # after the metrics it charts, before the templates (the last, slowest part)
    assert order.index("gcloud logging metrics create") < order.index("gcloud monitoring dashboards create")
    assert sample.config["DASHBOARD_ID"] == "worker-chart-export"


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({}, {"timeout": "300", "concurrency": "4", "max-instances": "5"}),
        (
            {"REQUEST_TIMEOUT_SECONDS": "540", "CONCURRENCY": "2", "MAX_INSTANCES": "20"},
            {"timeout": "540", "concurrency": "2", "max-instances": "20"},
        ),
        ({"TIMEOUT_SECONDS": "420"}, {"timeout": "420", "concurrency": "4", "max-instances": "5"}),
    ],
)
def test_scale_knobs_reach_the_service_and_its_environment(
    tmp_path: Path, knobs: dict[str, str], expected: dict[str, str]
) -> None:
    deploy = dry_run(tmp_path, **knobs).one("gcloud", "run", "deploy", "worker-chart-export")
    assert {k: flag(deploy, k) for k in expected} == expected
    env = env_pairs(flag(deploy, "set-env-vars") or "")
    assert (env["REQUEST_TIMEOUT_SECONDS"], env["THREADS"]) == (expected["timeout"], expected["concurrency"])


def test_an_existing_image_skips_the_build(tmp_path: Path) -> None:
    run = dry_run(tmp_path, IMAGE="europe-docker.pkg.dev/x/y/worker:v1")
    assert not run.find("gcloud", "builds", "submit")
    worker = run.one("gcloud", "run", "deploy", "worker-chart-export")
    assert flag(worker, "image") == "europe-docker.pkg.dev/x/y/worker:v1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"PROJECT_ID": ""}, "PROJECT_ID"),
        ({"FIRESTORE_LOCATION": ""}, "FIRESTORE_LOCATION"),
        (
            {"REQUEST_TIMEOUT_SECONDS": "601"},
            "REQUEST_TIMEOUT_SECONDS must be 1..600 (Pub/Sub's maximum acknowledgement deadline is 600 s)",
        ),
        ({"ADVANCE_TIMEOUT_SECONDS": "0"}, "ADVANCE_TIMEOUT_SECONDS must be 1..600"),
        ({"CHARTS_BUCKET": "gs://Not_A_Bucket!"}, "CHARTS_BUCKET: expected a bucket name or gs://<bucket>"),
        ({"FINALIZE_BUDGET_SECONDS": "300"}, "FINALIZE_BUDGET_SECONDS must be below"),
        ({"MAX_DELIVERY_ATTEMPTS": "2"}, "MAX_DELIVERY_ATTEMPTS must be 5..100"),
        ({"DASHBOARD_ID": "a|b"}, "DASHBOARD_ID: expected letters, digits, '-' and '_'"),
    ],
)
def test_bad_configuration_is_refused_before_any_command(
    tmp_path: Path, overrides: dict[str, str], message: str
) -> None:
    env = {"PATH": os.environ["PATH"], **SAMPLE, **overrides}
    command = ["bash", str(DEPLOY), "--dry-run"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode != 0 and message in result.stderr
    assert "gcloud" not in result.stdout


def test_unknown_argument_is_refused() -> None:
    result = subprocess.run(["bash", str(DEPLOY), "--dryrun"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "unknown argument: --dryrun" in result.stderr


def test_every_missing_variable_is_named_in_one_message() -> None:
    env = {"PATH": os.environ["PATH"], "REGION": "europe-west1"}
    result = subprocess.run(
        ["bash", str(DEPLOY), "--dry-run"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "deploy.sh: missing required variables: PROJECT_ID FIRESTORE_LOCATION CHARTS_BUCKET "
        "(see deploy/README.md, Configuration)"
    ]


def test_several_bad_values_are_all_reported_before_any_command() -> None:
    env = {
        "PATH": os.environ["PATH"],
        **SAMPLE,
        "REQUEST_TIMEOUT_SECONDS": "900",
        "MAX_DELIVERY_ATTEMPTS": "x",
    }
    result = subprocess.run(
        ["bash", str(DEPLOY), "--dry-run"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and result.stdout == ""
    assert [line.split(" must ")[0] for line in result.stderr.splitlines()] == [
        "deploy.sh: REQUEST_TIMEOUT_SECONDS",
        "deploy.sh: MAX_DELIVERY_ATTEMPTS",
    ]


@pytest.mark.parametrize(
    "bucket", ["gs://acme-charts-public", "gs://acme-charts-public/", "acme-charts-public"]
)
def test_the_bucket_may_be_given_as_a_gs_uri(tmp_path: Path, bucket: str) -> None:
    run = dry_run(tmp_path, CHARTS_BUCKET=bucket)
    assert run.config["CHARTS_BUCKET"] == "acme-charts-public"
    run.one("gcloud", "storage", "buckets", "create", "gs://acme-charts-public")
    env = env_pairs(flag(run.one("gcloud", "run", "deploy", "worker-chart-export"), "set-env-vars") or "")
    assert env["CHARTS_BUCKET"] == "acme-charts-public"


def test_each_trigger_subscription_gets_its_service_timeout_as_ack_deadline(tmp_path: Path) -> None:
    run = dry_run(tmp_path, REQUEST_TIMEOUT_SECONDS="540", ADVANCE_TIMEOUT_SECONDS="5")
    updates = {c[4]: flag(c, "ack-deadline") for c in run.find("gcloud", "pubsub", "subscriptions", "update")}
    assert updates == {
        "<subscription of worker-chart-export-flow-runs>": "540",
        "<subscription of worker-chart-export-advance-flow-trigger>": "10",  # Pub/Sub's minimum
    }
    advance = run.one("gcloud", "run", "deploy", "worker-chart-export-advance-flow")
    assert flag(advance, "timeout") == "5"
