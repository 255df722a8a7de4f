"""deploy/firestore.rules on the real Firestore emulator, started with `--rules`.

Clients speak the emulator's REST API as a client SDK would: anonymous (no Authorization
header) and signed in (an unsigned Firebase ID token, which the emulator accepts as the
signed-in user it names; a control run with a rules file that admits signed-in users shows
that it does). The server SDK (google-cloud-firestore, which sends `Bearer owner` to an
emulator, as server credentials bypass rules in production) runs the worker's own kinds of
reads and writes. A rules file that fails to compile answers 400 INVALID_ARGUMENT, not 403:
every refusal below is checked to be the rules' own `PERMISSION_DENIED`.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from harness.builders import REPO
from harness.firestore_emulator import FirestoreEmulator, start_firestore_emulator
from worker_chart_export.core.naming import (
    ACCOUNTS_USAGE_COLLECTION,
    CHART_TEMPLATES_COLLECTION,
    FLOW_RUNS_COLLECTION,
    STEP_LEASES_COLLECTION,
)

RULES = REPO / "deploy" / "firestore.rules"
RUN, LEASE, ACCOUNT, TEMPLATE = "run_rules_0001", "lease_rules_0001", "acc1", "price_psar_adi_v1"
DOCUMENTS = {
    FLOW_RUNS_COLLECTION: RUN,
    CHART_TEMPLATES_COLLECTION: TEMPLATE,
    STEP_LEASES_COLLECTION: LEASE,
    ACCOUNTS_USAGE_COLLECTION: ACCOUNT,
}
Answer = tuple[int, dict[str, Any]]


def _b64url(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def signed_in_token(project: str, uid: str = "intruder") -> str:
    """A Firebase ID token for `uid`, unsigned (alg none): the emulator takes it at its word."""
    claims = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": project,
        "sub": uid,
        "user_id": uid,
        "iat": 1_700_000_000,
        "auth_time": 1_700_000_000,
        "exp": 4_000_000_000,
        "firebase": {"sign_in_provider": "password", "identities": {}},
    }
    return f"{_b64url({'alg': 'none', 'typ': 'JWT'})}.{_b64url(claims)}."


class RestClient:
    """A client of the emulator's REST API with one identity (None: anonymous)."""

    def __init__(self, emulator: FirestoreEmulator, token: str | None) -> None:
        self.root = f"projects/{emulator.project}/databases/(default)/documents"
        self.base = f"{emulator.base_url}/v1/{self.root}"
        self.token = token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def operations(self, collection: str, document: str) -> dict[str, Answer]:
        """Every way a client reaches a document or its collection: read, query, write."""
        path = f"/{collection}/{document}"
        update = {"fields": {"status": {"stringValue": "READY"}}}
        query = {"structuredQuery": {"from": [{"collectionId": collection}]}}
        commit = {"writes": [{"update": {"name": f"{self.root}{path}", **update}}]}
        return {
            "get": self.call("GET", path),
            "list": self.call("GET", f"/{collection}"),
            "query": self.call("POST", ":runQuery", query),
            "create": self.call("POST", f"/{collection}?documentId=planted", update),
            "update": self.call("PATCH", f"{path}?updateMask.fieldPaths=status", update),
            "commit": self.call("POST", ":commit", commit),
            "delete": self.call("DELETE", path),
        }


def refused(answer: Answer) -> bool:
    """The rules' own refusal: 403 PERMISSION_DENIED (a rules file that fails to compile
    answers 400, a missing document 404)."""
    status, body = answer
    error = body.get("error", {}) if isinstance(body, dict) else {}
    return status == 403 and error.get("status") == "PERMISSION_DENIED"


def seed(client: firestore.Client) -> dict[str, dict[str, Any]]:
    """What the worker keeps in each collection, written with the server SDK."""
    now = datetime.now(UTC)
    documents: dict[str, dict[str, Any]] = {
        FLOW_RUNS_COLLECTION: {
            "runId": RUN,
            "status": "SUCCEEDED",
            "steps": {"charts_1h": {"status": "SUCCEEDED"}},
        },
        CHART_TEMPLATES_COLLECTION: {"chartTemplateId": TEMPLATE, "request": {"width": 800, "height": 600}},
        STEP_LEASES_COLLECTION: {
            "runId": RUN,
            "stepId": "charts_1h",
            "expiresAt": now - timedelta(minutes=1),
        },
        ACCOUNTS_USAGE_COLLECTION: {"accountId": ACCOUNT, "usageToday": 3, "dailyLimit": 44},
    }
    for collection, data in documents.items():
        client.collection(collection).document(DOCUMENTS[collection]).set(data)
    return {
        collection: client.collection(collection).document(DOCUMENTS[collection]).get().to_dict() or {}
        for collection in documents
    }


@pytest.fixture(scope="module")
def closed(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[tuple[FirestoreEmulator, firestore.Client]]:
    emulator = start_firestore_emulator(rules=RULES)
    monkeypatch_module.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
    client = firestore.Client(project=emulator.project)
    try:
        yield emulator, client
    finally:
        client.close()
        emulator.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


@pytest.mark.parametrize("identity", ["anonymous", "signed in"])
@pytest.mark.parametrize("collection", list(DOCUMENTS))
def test_a_client_is_refused_every_read_and_write(
    closed: tuple[FirestoreEmulator, firestore.Client], identity: str, collection: str
) -> None:
    emulator, server = closed
    before = seed(server)
    token = None if identity == "anonymous" else signed_in_token(emulator.project)
    answers = RestClient(emulator, token).operations(collection, DOCUMENTS[collection])
    assert {name: refused(answer) for name, answer in answers.items()} == dict.fromkeys(answers, True), (
        answers
    )
    after = server.collection(collection).document(DOCUMENTS[collection]).get().to_dict()
    assert after == before[collection]
    assert not server.collection(collection).document("planted").get().exists


@pytest.mark.parametrize(
    ("collection", "field", "value"),
    [
        # issue 25's three: a SUCCEEDED step set back to READY (paid again), an account's day
        # used up (every step fails with 0 calls), a limit raised past the plan's
        (FLOW_RUNS_COLLECTION, "steps.charts_1h.status", {"stringValue": "READY"}),
        (ACCOUNTS_USAGE_COLLECTION, "usageToday", {"integerValue": "44"}),
        (ACCOUNTS_USAGE_COLLECTION, "dailyLimit", {"integerValue": "100000"}),
    ],
)
def test_the_attacks_a_client_could_make_are_refused_and_change_nothing(
    closed: tuple[FirestoreEmulator, firestore.Client], collection: str, field: str, value: dict[str, str]
) -> None:
    emulator, server = closed
    before = seed(server)
    *parents, leaf = field.split(".")
    fields: dict[str, Any] = {leaf: value}
    for parent in reversed(parents):
        fields = {parent: {"mapValue": {"fields": fields}}}
    path = f"/{collection}/{DOCUMENTS[collection]}?updateMask.fieldPaths={field}"
    for token in (None, signed_in_token(emulator.project)):
        answer = RestClient(emulator, token).call("PATCH", path, {"fields": fields})
        assert refused(answer), answer
    assert server.collection(collection).document(DOCUMENTS[collection]).get().to_dict() == before[collection]


def test_the_server_sdk_reads_and_writes_as_the_worker_does(
    closed: tuple[FirestoreEmulator, firestore.Client],
) -> None:
    _, server = closed
    seed(server)
    runs = server.collection(FLOW_RUNS_COLLECTION)

    @firestore.transactional
    def claim(transaction: firestore.Transaction) -> None:  # a claim's shape: read, then write
        snapshot = runs.document(RUN).get(transaction=transaction)
        assert snapshot.get("status") == "SUCCEEDED"
        transaction.update(runs.document(RUN), {"steps.charts_1h.status": "RUNNING"})

    claim(server.transaction())
    assert runs.document(RUN).get().get("steps.charts_1h.status") == "RUNNING"
    # the reaper's query, a usage reservation, a template sync, a lease's deletion
    leases = server.collection(STEP_LEASES_COLLECTION)
    expired = list(leases.where(filter=firestore.FieldFilter("expiresAt", "<=", datetime.now(UTC))).stream())
    assert [s.id for s in expired] == [LEASE]
    usage = server.collection(ACCOUNTS_USAGE_COLLECTION).document(ACCOUNT)
    usage.update({"usageToday": firestore.Increment(1)})
    assert usage.get().get("usageToday") == 4
    server.collection(CHART_TEMPLATES_COLLECTION).document("synced_v1").set({"chartTemplateId": "synced_v1"})
    assert server.collection(CHART_TEMPLATES_COLLECTION).document("synced_v1").get().exists
    leases.document(LEASE).delete()
    assert not leases.document(LEASE).get().exists


def test_the_clients_are_what_they_claim_a_rules_file_admitting_signed_in_users_admits_this_one(
    tmp_path: Path,
) -> None:
    """The control: the same requests against rules that let signed-in users in. Were the
    token rejected, or the emulator checking nothing, the refusals above would prove nothing."""
    rules = tmp_path / "signed_in.rules"
    rules.write_text(
        "rules_version = '2';\nservice cloud.firestore {\n  match /databases/{database}/documents {\n"
        "    match /{document=**} {\n      allow read, write: if request.auth.uid == 'intruder';\n"
        "    }\n  }\n}\n"
    )
    with start_firestore_emulator(rules=rules) as emulator:
        signed_in = RestClient(emulator, signed_in_token(emulator.project))
        anonymous = RestClient(emulator, None)
        created = signed_in.call("POST", f"/{FLOW_RUNS_COLLECTION}?documentId={RUN}", {"fields": {}})
        assert created[0] == 200, created
        assert signed_in.call("GET", f"/{FLOW_RUNS_COLLECTION}/{RUN}")[0] == 200
        assert refused(anonymous.call("GET", f"/{FLOW_RUNS_COLLECTION}/{RUN}"))
        other = RestClient(emulator, signed_in_token(emulator.project, uid="someone-else"))
        assert refused(other.call("GET", f"/{FLOW_RUNS_COLLECTION}/{RUN}"))
