"""A Google Cloud project as deploy.sh meets it through gcloud, for the fake `gcloud`.

Resources exist or not, in the shapes the APIs return them (a trigger's eventFilters, a
subscription's deadLetterPolicy, a bucket's IAM policy...); `describe` prints them through
gcloud's own resource printer (`render`, given by the caller) with the call's --format and
--flatten, or answers as gcloud does for an absent one (NOT_FOUND, exit 1). Creating what
exists, or changing what does not, fails as the API would, and so do the refusals deploy.sh has
to live with: a trigger's event type cannot be updated; an acknowledgement deadline is 10..600
s; a trigger needs its Cloud Run service and account; a binding needs its resource. The state
is one JSON file, so a re-deploy runs against what the first deploy left.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Render = Callable[..., str]
Answer = tuple[int, str, str]  # exit status, stdout, stderr
# what `gcloud auth print-access-token` hands deploy.sh: fake_curl.py takes only this one
ACCESS_TOKEN = "ya29.fake-deployer-token-0123456789"
# What `gcloud run regions list` answers once Cloud Run's API is enabled: Cloud Run's regions as
# its documentation (cloud.google.com/run/docs/locations) listed them in 2025.
CLOUD_RUN_REGIONS = [
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west10",
    "europe-west12",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "northamerica-south1",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
]


class Refused(Exception):
    """What the API (or gcloud after it) answers to an impossible call: exit 1 with this."""


def split_args(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Positionals, and --flag=value flags (a bare --flag counts as "")."""
    positionals: list[str] = []
    flags: dict[str, list[str]] = {}
    for arg in argv:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags.setdefault(name, []).append(value)
        else:
            positionals.append(arg)
    return positionals, flags


class Call:
    def __init__(self, path: tuple[str, ...], argv: list[str], cwd: Path) -> None:
        positionals, self.flags = split_args(argv)
        self.path = path
        self.args = positionals[len(path) :]
        self.cwd = cwd

    def flag(self, name: str, default: str | None = None) -> str | None:
        values = self.flags.get(name)
        return values[-1] if values else default

    def need(self, name: str) -> str:
        value = self.flag(name)
        if value is None:
            raise Refused(f"argument --{name}: must be specified")
        return value

    def file(self, name: str) -> bytes:
        return (self.cwd / self.need(name)).read_bytes()

    @property
    def command(self) -> str:
        return "gcloud." + ".".join(self.path)


class Project:
    def __init__(self, state_file: Path, project_id: str, number: str, render: Render) -> None:
        self.state_file = state_file
        self.project_id = project_id
        self.number = number
        self.render = render
        self.state: dict[str, Any] = (
            json.loads(state_file.read_text())
            if state_file.exists()
            else {"resources": {}, "iam": {}, "counter": 0}
        )

    # --- state ------------------------------------------------------------------------------

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=1, sort_keys=True))

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.state["resources"].get(kind, {}).get(key)
        return found

    def put(self, kind: str, key: str, resource: dict[str, Any]) -> None:
        self.state["resources"].setdefault(kind, {})[key] = resource

    def create(self, call: Call, kind: str, key: str, resource: dict[str, Any]) -> Answer:
        if self.get(kind, key) is not None:
            raise Refused(f"ALREADY_EXISTS: Resource '{key}' already exists")
        self.put(kind, key, resource)
        return 0, "", f"Created [{key}].\n"

    def existing(self, call: Call, kind: str, key: str) -> dict[str, Any]:
        found = self.get(kind, key)
        if found is None:
            raise Refused(f"NOT_FOUND: Resource '{key}' was not found")
        return found

    def next_id(self) -> int:
        self.state["counter"] += 1
        return int(self.state["counter"])

    def bind(self, call: Call, target: str) -> Answer:
        member = call.need("member")
        if self.state.get("iam_settling", 0) > 0 and member.startswith("serviceAccount:"):
            # a new project: IAM does not see the account everywhere yet (each refusal counts)
            self.state["iam_settling"] -= 1
            self.save()
            raise Refused(f"INVALID_ARGUMENT: Service account {member.split(':', 1)[1]} does not exist.")
        binding = [call.need("role"), member]
        bindings = self.state["iam"].setdefault(target, [])
        if binding not in bindings:
            bindings.append(binding)
        return 0, "Updated IAM policy.\n", ""

    def bindings(self, target: str) -> list[list[str]]:
        found: list[list[str]] = self.state["iam"].get(target, [])
        return found

    # --- answering --------------------------------------------------------------------------

    def answer(self, argv: list[str], cwd: Path) -> Answer | None:
        """gcloud's answer to argv, or None when this fake has no answer for that command."""
        handlers = self.handlers()
        positionals = split_args(argv)[0]
        for length in (5, 4, 3, 2):
            path = tuple(positionals[:length])
            if path in handlers:
                call = Call(path, argv, cwd)
                try:
                    return handlers[path](call)
                except Refused as exc:
                    return 1, "", f"ERROR: ({call.command}) {exc}\n"
        return None

    def show(self, call: Call, resource: dict[str, Any] | list[dict[str, Any]]) -> Answer:
        """A describe's (or list's) output, as gcloud prints it for the call's format flags."""
        resources = resource if isinstance(resource, list) else [resource]
        text = self.render(
            resources,
            call.flag("format"),
            flatten=call.flags.get("flatten", []),
            filter_expression=call.flag("filter"),
            single=not isinstance(resource, list),
        )
        return 0, text, ""

    def describe(self, call: Call, kind: str, key: str, absent: str | None = None) -> Answer:
        found = self.get(kind, key)
        if found is None:
            raise Refused(absent or f"NOT_FOUND: Resource '{key}' was not found")
        return self.show(call, found)

    def handlers(self) -> dict[tuple[str, ...], Callable[[Call], Answer]]:
        return {
            ("auth", "print-access-token"): lambda c: (0, ACCESS_TOKEN + "\n", ""),
            ("auth", "application-default", "print-access-token"): lambda c: (0, "ya29.fake-adc\n", ""),
            ("services", "enable"): self.services_enable,
            ("builds", "submit"): lambda c: (0, f"ID  STATUS\n1  SUCCESS {c.flag('tag')}\n", ""),
            ("firestore", "indexes", "fields", "update"): lambda c: (0, "", "Request issued.\n"),
            ("firestore", "databases", "describe"): self.database_describe,
            ("firestore", "databases", "create"): self.database_create,
            ("iam", "service-accounts", "describe"): lambda c: self.describe(c, "sa", c.args[0]),
            ("iam", "service-accounts", "create"): self.service_account_create,
            ("iam", "service-accounts", "add-iam-policy-binding"): lambda c: self.bind_to(c, "sa"),
            ("artifacts", "repositories", "describe"): lambda c: self.describe(c, "repo", c.args[0]),
            ("artifacts", "repositories", "create"): self.repository_create,
            ("storage", "buckets", "describe"): self.bucket_describe,
            ("storage", "buckets", "create"): self.bucket_create,
            ("storage", "buckets", "update"): self.bucket_update,
            ("storage", "buckets", "add-iam-policy-binding"): lambda c: self.bind_to(c, "bucket"),
            ("storage", "buckets", "remove-iam-policy-binding"): self.bucket_unbind,
            ("storage", "buckets", "get-iam-policy"): self.bucket_policy,
            ("secrets", "describe"): lambda c: self.describe(c, "secret", c.args[0]),
            ("secrets", "create"): self.secret_create,
            ("secrets", "versions", "add"): self.secret_add_version,
            ("secrets", "versions", "access"): self.secret_access,
            ("secrets", "versions", "describe"): self.secret_version_describe,
            ("secrets", "add-iam-policy-binding"): lambda c: self.bind_to(c, "secret"),
            ("projects", "describe"): self.project_describe,
            ("projects", "add-iam-policy-binding"): lambda c: self.bind(c, "project"),
            ("run", "regions", "list"): self.run_regions,
            ("run", "deploy"): self.run_deploy,
            ("run", "services", "describe"): self.run_describe,
            ("run", "services", "add-iam-policy-binding"): self.run_bind,
            ("eventarc", "triggers", "describe"): self.trigger_describe,
            ("eventarc", "triggers", "create"): self.trigger_create,
            ("eventarc", "triggers", "update"): self.trigger_update,
            ("eventarc", "triggers", "delete"): self.trigger_delete,
            ("pubsub", "topics", "describe"): lambda c: self.describe(c, "topic", c.args[0]),
            ("pubsub", "topics", "create"): self.topic_create,
            ("pubsub", "topics", "add-iam-policy-binding"): lambda c: self.bind_to(c, "topic"),
            ("pubsub", "subscriptions", "describe"): self.subscription_describe,
            ("pubsub", "subscriptions", "create"): self.subscription_create,
            ("pubsub", "subscriptions", "update"): self.subscription_update,
            ("pubsub", "subscriptions", "add-iam-policy-binding"): self.subscription_bind,
            ("scheduler", "jobs", "describe"): lambda c: self.describe(c, "job", c.args[0]),
            ("scheduler", "jobs", "create", "http"): self.job_create,
            ("scheduler", "jobs", "update", "http"): self.job_update,
            ("logging", "metrics", "describe"): lambda c: self.describe(c, "metric", c.args[0]),
            ("logging", "metrics", "create"): self.metric_create,
            ("logging", "metrics", "update"): self.metric_update,
            ("alpha", "monitoring", "policies", "list"): self.policy_list,
            ("alpha", "monitoring", "policies", "create"): self.policy_create,
            ("alpha", "monitoring", "policies", "update"): self.policy_update,
            ("monitoring", "dashboards", "describe"): self.dashboard_describe,
            ("monitoring", "dashboards", "create"): self.dashboard_create,
            ("monitoring", "dashboards", "update"): self.dashboard_update,
        }

    def bind_to(self, call: Call, kind: str) -> Answer:
        key = call.args[0].removeprefix("gs://")
        resource = self.existing(call, kind, key)
        if kind == "bucket" and call.need("member") in ("allUsers", "allAuthenticatedUsers"):
            if self.state.get("org_policy_forbids_all_users"):  # domain-restricted sharing
                raise Refused(
                    "HTTPError 412: One or more users named in the policy do not belong to a permitted "
                    "customer."
                )
            if resource.get("public_access_prevention") == "enforced":
                raise Refused(
                    "HTTPError 412: The member bindings allUsers and allAuthenticatedUsers are not allowed "
                    "since public access prevention is enforced."
                )
        return self.bind(call, f"{kind}:{key}")

    # --- Firestore, accounts, registry, bucket ----------------------------------------------

    def database_describe(self, call: Call) -> Answer:
        absent = (
            f"NOT_FOUND: The database (default) does not exist for project {self.project_id} "
            "Please visit https://console.cloud.google.com/datastore/setup to add a database."
        )
        return self.describe(call, "database", call.flag("database", "(default)") or "", absent)

    def database_create(self, call: Call) -> Answer:
        database = call.flag("database", "(default)") or ""
        kind = {"firestore-native": "FIRESTORE_NATIVE", "datastore-mode": "DATASTORE_MODE"}
        resource = {
            "name": f"projects/{self.project_id}/databases/{database}",
            "locationId": call.need("location"),
            "type": kind[call.flag("type", "firestore-native") or ""],
            "concurrencyMode": "PESSIMISTIC",
        }
        return self.create(call, "database", database, resource)

    def service_account_create(self, call: Call) -> Answer:
        email = f"{call.args[0]}@{self.project_id}.iam.gserviceaccount.com"
        resource = {"email": email, "name": f"projects/{self.project_id}/serviceAccounts/{email}"}
        return self.create(call, "sa", email, resource)

    def repository_create(self, call: Call) -> Answer:
        location = call.need("location")
        name = f"projects/{self.project_id}/locations/{location}/repositories/{call.args[0]}"
        return self.create(call, "repo", call.args[0], {"name": name, "format": "DOCKER"})

    def bucket_describe(self, call: Call) -> Answer:
        name = call.args[0].removeprefix("gs://")
        return self.describe(call, "bucket", name, absent=f"gs://{name} not found: 404.")

    def bucket_create(self, call: Call) -> Answer:
        name = call.args[0].removeprefix("gs://")
        resource = {
            "name": name,
            "location": call.need("location").upper(),
            "uniform_bucket_level_access": "uniform-bucket-level-access" in call.flags,
            "public_access_prevention": (
                "enforced" if "public-access-prevention" in call.flags else "inherited"
            ),
        }
        return self.create(call, "bucket", name, resource)

    def bucket_update(self, call: Call) -> Answer:
        bucket = self.existing(call, "bucket", call.args[0].removeprefix("gs://"))
        if "public-access-prevention" in call.flags:
            bucket["public_access_prevention"] = "enforced"
        return 0, "", f"Updating {call.args[0]}...\n"

    def bucket_policy(self, call: Call) -> Answer:
        name = call.args[0].removeprefix("gs://")
        self.existing(call, "bucket", name)
        roles: dict[str, list[str]] = {}
        for role, member in self.bindings(f"bucket:{name}"):
            roles.setdefault(role, []).append(member)
        policy = {"bindings": [{"role": r, "members": m} for r, m in roles.items()], "etag": "CAE="}
        return self.show(call, policy)

    def bucket_unbind(self, call: Call) -> Answer:
        bindings = self.bindings(f"bucket:{call.args[0].removeprefix('gs://')}")
        binding = [call.need("role"), call.need("member")]
        if binding not in bindings:
            raise Refused("Policy binding with the specified principal, role, and condition not found!")
        bindings.remove(binding)
        return 0, "Updated IAM policy.\n", ""

    # --- secret -----------------------------------------------------------------------------

    def secret_create(self, call: Call) -> Answer:
        name = call.args[0]
        resource = {"name": f"projects/{self.number}/secrets/{name}", "replication": {"automatic": {}}}
        answer = self.create(call, "secret", name, resource)
        self.state.setdefault("secret_versions", {})[name] = [self._encoded(call)]
        return answer

    def secret_add_version(self, call: Call) -> Answer:
        self.existing(call, "secret", call.args[0])
        versions = self.state["secret_versions"][call.args[0]]
        versions.append(self._encoded(call))
        return 0, "", f"Created version [{len(versions)}] of the secret [{call.args[0]}].\n"

    def secret_version(self, call: Call) -> tuple[str, int]:
        """The secret and the number of the version the call names (`latest` resolved)."""
        secret = call.need("secret")
        self.existing(call, "secret", secret)
        count = len(self.state["secret_versions"][secret])
        number = count if call.args[0] == "latest" else int(call.args[0])
        if not 1 <= number <= count:
            raise Refused(f"NOT_FOUND: Secret Version [{call.args[0]}] not found.")
        return secret, number

    def secret_version_describe(self, call: Call) -> Answer:
        secret, number = self.secret_version(call)
        disabled = number in self.state.get("secret_disabled", {}).get(secret, [])
        resource = {
            "name": f"projects/{self.number}/secrets/{secret}/versions/{number}",
            "state": "DISABLED" if disabled else "ENABLED",
        }
        return self.show(call, resource)

    def secret_access(self, call: Call) -> Answer:
        secret, number = self.secret_version(call)
        if number in self.state.get("secret_disabled", {}).get(secret, []):
            raise Refused(f"FAILED_PRECONDITION: Secret Version [{number}] is in DISABLED state.")
        data = base64.b64decode(self.state["secret_versions"][secret][number - 1])
        (call.cwd / call.need("out-file")).write_bytes(data)
        return 0, "", ""

    @staticmethod
    def _encoded(call: Call) -> str:
        return base64.b64encode(call.file("data-file")).decode()

    # --- project, Cloud Run -----------------------------------------------------------------

    def services_enable(self, call: Call) -> Answer:
        enabled = self.state.setdefault("enabled_services", [])
        enabled.extend(api for api in call.args if api not in enabled)
        return 0, "", "Operation finished successfully.\n"

    def run_regions(self, call: Call) -> Answer:
        """A new project has Cloud Run's API disabled until `services enable` (or a state saying
        it was enabled before): the list is then refused, as the API refuses it."""
        if "run.googleapis.com" not in self.state.get("enabled_services", []):
            raise Refused(
                f"PERMISSION_DENIED: Cloud Run Admin API has not been used in project {self.number} before "
                "or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
                f"run.googleapis.com/overview?project={self.number} then retry."
            )
        locations = [
            {"locationId": region, "name": f"projects/{self.project_id}/locations/{region}"}
            for region in CLOUD_RUN_REGIONS
        ]
        return self.show(call, locations)

    def project_describe(self, call: Call) -> Answer:
        resource = {
            "projectId": call.args[0],
            "projectNumber": self.number,
            "lifecycleState": "ACTIVE",
            "name": call.args[0],
        }
        return self.show(call, resource)

    def run_deploy(self, call: Call) -> Answer:
        region, name = call.need("region"), call.args[0]
        self.existing(call, "sa", call.need("service-account"))
        for pair in (call.flag("set-secrets") or "").split(","):
            if pair:
                secret, _, version = pair.split("=", 1)[1].partition(":")
                self.existing(call, "secret", secret)
                count = len(self.state["secret_versions"][secret])
                if version != "latest" and not 1 <= int(version) <= count:
                    raise Refused(f"NOT_FOUND: secret {secret} has no version {version}")
        url = f"https://{name}-{self.number[:10]}.{region}.run.app"
        resource = {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": self.number},
            "spec": {"flags": call.flags},
            "status": {"url": url},
        }
        self.put("run", f"{region}/{name}", resource)
        return 0, "", f"Service [{name}] has been deployed and is serving traffic.\nService URL: {url}\n"

    def run_describe(self, call: Call) -> Answer:
        return self.describe(call, "run", f"{call.need('region')}/{call.args[0]}")

    def run_bind(self, call: Call) -> Answer:
        key = f"{call.need('region')}/{call.args[0]}"
        self.existing(call, "run", key)
        return self.bind(call, f"run:{key}")

    # --- Eventarc and Pub/Sub ---------------------------------------------------------------

    def trigger_key(self, call: Call) -> str:
        return f"{call.need('location')}/{call.args[0]}"

    def trigger_describe(self, call: Call) -> Answer:
        return self.describe(call, "trigger", self.trigger_key(call))

    @staticmethod
    def event_filters(call: Call) -> list[dict[str, str]]:
        filters = [
            dict(zip(("attribute", "value"), f.split("=", 1), strict=True))
            for f in call.flags.get("event-filters", [])
        ]
        for pattern in call.flags.get("event-filters-path-pattern", []):
            attribute, value = pattern.split("=", 1)
            filters.append({"attribute": attribute, "operator": "match-path-pattern", "value": value})
        # the API keeps no order: deploy.sh must not rely on one
        return sorted(filters, key=lambda f: f["attribute"], reverse=True)

    def trigger_create(self, call: Call) -> Answer:
        location, name = call.need("location"), call.args[0]
        service, region = call.need("destination-run-service"), call.need("destination-run-region")
        self.existing(call, "run", f"{region}/{service}")
        self.existing(call, "sa", call.need("service-account"))
        number = self.next_id()
        subscription = f"eventarc-{location}-{name}-sub-{number:03d}"
        resource = {
            "name": f"projects/{self.project_id}/locations/{location}/triggers/{name}",
            "eventFilters": self.event_filters(call),
            "destination": {"cloudRun": {"service": service, "region": region}},
            "serviceAccount": call.need("service-account"),
            "eventDataContentType": call.flag("event-data-content-type", "application/json"),
            "transport": {
                "pubsub": {
                    "subscription": f"projects/{self.project_id}/subscriptions/{subscription}",
                    "topic": f"projects/{self.project_id}/topics/eventarc-{location}-{name}-{number:03d}",
                }
            },
            "uid": f"uid-{number}",
        }
        answer = self.create(call, "trigger", f"{location}/{name}", resource)
        self.put(
            "subscription",
            subscription,
            {"name": f"projects/{self.project_id}/subscriptions/{subscription}", "ackDeadlineSeconds": 10},
        )
        return answer

    def trigger_update(self, call: Call) -> Answer:
        trigger = self.existing(call, "trigger", self.trigger_key(call))
        if "event-filters" in call.flags or "event-filters-path-pattern" in call.flags:
            new = self.event_filters(call)
            old_type = [f["value"] for f in trigger["eventFilters"] if f["attribute"] == "type"]
            if [f["value"] for f in new if f["attribute"] == "type"] != old_type:
                raise Refused("INVALID_ARGUMENT: The request was invalid: the event type cannot be changed")
            trigger["eventFilters"] = new
        cloud_run = trigger["destination"]["cloudRun"]
        cloud_run["service"] = call.flag("destination-run-service", cloud_run["service"])
        cloud_run["region"] = call.flag("destination-run-region", cloud_run["region"])
        self.existing(call, "run", f"{cloud_run['region']}/{cloud_run['service']}")
        trigger["serviceAccount"] = call.flag("service-account", trigger["serviceAccount"])
        content_type = call.flag("event-data-content-type", trigger["eventDataContentType"])
        trigger["eventDataContentType"] = content_type
        return 0, "", f"Updating trigger [{call.args[0]}]...done.\n"

    def trigger_delete(self, call: Call) -> Answer:
        key = self.trigger_key(call)
        trigger = self.existing(call, "trigger", key)
        del self.state["resources"]["trigger"][key]
        subscription = trigger["transport"]["pubsub"]["subscription"].rsplit("/", 1)[1]
        self.state["resources"]["subscription"].pop(subscription, None)
        return 0, "", f"Deleted [{trigger['name']}].\n"

    def topic_create(self, call: Call) -> Answer:
        name = f"projects/{self.project_id}/topics/{call.args[0]}"
        return self.create(call, "topic", call.args[0], {"name": name})

    def subscription_describe(self, call: Call) -> Answer:
        return self.describe(call, "subscription", call.args[0].rsplit("/", 1)[-1])

    def subscription_create(self, call: Call) -> Answer:
        self.existing(call, "topic", call.need("topic"))
        resource = {
            "name": f"projects/{self.project_id}/subscriptions/{call.args[0]}",
            "topic": f"projects/{self.project_id}/topics/{call.need('topic')}",
            "ackDeadlineSeconds": int(call.flag("ack-deadline", "10") or 10),
            "messageRetentionDuration": "604800s",
        }
        return self.create(call, "subscription", call.args[0], resource)

    def subscription_update(self, call: Call) -> Answer:
        subscription = self.existing(call, "subscription", call.args[0].rsplit("/", 1)[-1])
        if call.flag("ack-deadline") is not None:
            ack = int(call.need("ack-deadline"))
            if not 10 <= ack <= 600:
                raise Refused("INVALID_ARGUMENT: Invalid ack deadline given (must be 10..600 seconds)")
            subscription["ackDeadlineSeconds"] = ack
        if call.flag("dead-letter-topic") is not None:
            self.existing(call, "topic", call.need("dead-letter-topic"))
            subscription["deadLetterPolicy"] = {
                "deadLetterTopic": f"projects/{self.project_id}/topics/{call.need('dead-letter-topic')}",
                "maxDeliveryAttempts": int(call.need("max-delivery-attempts")),
            }
        return 0, "", f"Updated subscription [{subscription['name']}].\n"

    def subscription_bind(self, call: Call) -> Answer:
        key = call.args[0].rsplit("/", 1)[-1]
        self.existing(call, "subscription", key)
        return self.bind(call, f"subscription:{key}")

    # --- scheduler, logging, monitoring -----------------------------------------------------

    def job_create(self, call: Call) -> Answer:
        return self.create(call, "job", call.args[0], self.job(call))

    def job_update(self, call: Call) -> Answer:
        self.existing(call, "job", call.args[0])
        self.put("job", call.args[0], self.job(call))
        return 0, "", f"Updated job [{call.args[0]}].\n"

    def job(self, call: Call) -> dict[str, Any]:
        self.existing(call, "sa", call.need("oidc-service-account-email"))
        return {
            "name": f"projects/{self.project_id}/locations/{call.need('location')}/jobs/{call.args[0]}",
            "schedule": call.need("schedule"),
            "httpTarget": {
                "uri": call.need("uri"),
                "httpMethod": call.need("http-method"),
                "oidcToken": {
                    "serviceAccountEmail": call.need("oidc-service-account-email"),
                    "audience": call.need("oidc-token-audience"),
                },
            },
            "attemptDeadline": call.need("attempt-deadline"),
        }

    def metric_create(self, call: Call) -> Answer:
        return self.create(call, "metric", call.args[0], json.loads(call.file("config-from-file")))

    def metric_update(self, call: Call) -> Answer:
        self.existing(call, "metric", call.args[0])
        self.put("metric", call.args[0], json.loads(call.file("config-from-file")))
        return 0, "", f"Updated [{call.args[0]}].\n"

    def policy_list(self, call: Call) -> Answer:
        return self.show(call, list(self.state["resources"].get("policy", {}).values()))

    def policy_create(self, call: Call) -> Answer:
        name = f"projects/{self.project_id}/alertPolicies/{self.next_id()}"
        policy = {**json.loads(call.file("policy-from-file")), "name": name}
        channels = call.flag("notification-channels")
        if channels:
            policy["notificationChannels"] = channels.split(",")
        return self.create(call, "policy", name, policy)

    def policy_update(self, call: Call) -> Answer:
        name = call.args[0]
        self.existing(call, "policy", name)
        policy = {**json.loads(call.file("policy-from-file")), "name": name}
        channels = call.flag("set-notification-channels")
        if channels:
            policy["notificationChannels"] = channels.split(",")
        self.put("policy", name, policy)
        return 0, "", f"Updated alert policy [{name}].\n"

    # --- dashboards: named by the file, replaced only with the etag of the version replaced --

    def dashboard_name(self, dashboard: str) -> str:
        return dashboard if "/" in dashboard else f"projects/{self.project_id}/dashboards/{dashboard}"

    def dashboard_describe(self, call: Call) -> Answer:
        return self.describe(
            call, "dashboard", self.dashboard_name(call.args[0]), "NOT_FOUND: Requested entity was not found."
        )

    def dashboard_create(self, call: Call) -> Answer:
        dashboard = json.loads(call.file("config-from-file"))
        if "etag" in dashboard:
            raise Refused("INVALID_ARGUMENT: etag must not be set when a dashboard is created")
        name = dashboard.get("name") or f"projects/{self.project_id}/dashboards/{self.next_id()}"
        if not name.startswith(f"projects/{self.project_id}/dashboards/"):
            raise Refused(f"INVALID_ARGUMENT: dashboard name {name} is not in project {self.project_id}")
        return self.create(call, "dashboard", name, {**dashboard, "name": name, "etag": self.new_etag()})

    def dashboard_update(self, call: Call) -> Answer:
        name = self.dashboard_name(call.args[0])
        current = self.existing(call, "dashboard", name)
        dashboard = json.loads(call.file("config-from-file"))
        if not dashboard.get("etag"):
            raise Refused("INVALID_ARGUMENT: Update Dashboard should specify a non empty etag.")
        if dashboard["etag"] != current["etag"]:
            raise Refused("ABORTED: the dashboard was changed meanwhile (etag mismatch)")
        if dashboard.get("name", name) != name:
            raise Refused(f"INVALID_ARGUMENT: the dashboard's name is {name}")
        self.put("dashboard", name, {**dashboard, "name": name, "etag": self.new_etag()})
        return 0, "", f"Updated dashboard [{name}].\n"

    def new_etag(self) -> str:
        return f"{self.next_id():032x}"
