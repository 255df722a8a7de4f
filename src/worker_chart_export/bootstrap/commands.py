"""The parts the CLI's commands and the tools take, built here so that no entry point imports
an adapter (pyproject's import contract "entry points reach adapters only through bootstrap").

Each adapter is imported when its part is first asked for: a command pays only for its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud import firestore, storage
    from pydantic import SecretStr

    from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
    from worker_chart_export.adapters.firestore.template_catalog import FirestoreTemplateCatalog
    from worker_chart_export.adapters.local import LocalFlowRunStore
    from worker_chart_export.core.documents import FlowRunDocument


# --- a flow_run JSON file (run-local, advance, submit, stack up)


def read_flow_run(path: Path, flag: str = "--flow-run-path") -> FlowRunDocument:
    """The flow_run at `path`, checked enough to be run (adapters/flow_run_file)."""
    from worker_chart_export.adapters.flow_run_file import read_flow_run as read

    return read(path, flag)


def read_valid_flow_run(
    path: Path, flag: str = "--flow-run-path", *, run_id: str | None = None
) -> FlowRunDocument:
    """The flow_run at `path` checked against its schema (adapters/flow_run_file)."""
    from worker_chart_export.adapters.flow_run_file import read_valid_flow_run as read

    return read(path, flag, run_id=run_id)


def local_flow_runs(source: Path, state: Path) -> LocalFlowRunStore:
    """run-local's flow_run store: read from `source`, every change written to `state`."""
    from worker_chart_export.adapters.local import LocalFlowRunStore

    return LocalFlowRunStore(source, state)


# --- the CHART-IMG accounts and their usage


def parse_accounts(
    text: str, *, setting: str | None = None, source: str | None = None
) -> tuple[AccountConfig, ...]:
    """An accounts JSON parsed as the worker parses it (its keys learnt for redaction)."""
    from worker_chart_export.adapters.chart_img.accounts_config import JSON_SOURCE
    from worker_chart_export.adapters.chart_img.accounts_config import parse_accounts as parse

    return parse(text, setting=setting or JSON_SOURCE, source=source)


def check_accounts_json(accounts_json: SecretStr | None) -> None:
    """CHART_IMG_ACCOUNTS_JSON (or the --accounts-config-path file standing in for it) parsed as
    the worker parses it, also where no account is called (mock mode): a malformed list is a
    mistake in every mode. A ConfigError names the problem, never a key; blank is none."""
    from worker_chart_export.adapters.chart_img.accounts_config import load_accounts

    load_accounts(accounts_json, None, None)  # no secret: mock mode reads nothing remote


def local_usage_documents(usage_file: Path) -> dict[str, Mapping[str, Any]]:
    """run-local's usage file read as the accounts' usage documents (creating nothing)."""
    from worker_chart_export.adapters.usage_local import FileUsageStore

    return FileUsageStore(usage_file).read_all()


# --- Firestore for a command (the producer's write, templates sync)


@contextmanager
def checked_firestore(project: str | None, emulator_host: str | None) -> Iterator[firestore.Client]:
    """A client that answered a first short read, closed on exit; every failure one line."""
    from worker_chart_export.adapters.firestore.checked_client import cli_firestore

    with cli_firestore(project, emulator_host) as client:
        yield client


def create_flow_run(client: firestore.Client, document: FlowRunDocument) -> str:
    """A new run, created once as a producer does (status PENDING); its runId."""
    from worker_chart_export.adapters.firestore.producer import create_flow_run as create

    return create(client, document)


def run_reader(
    client: firestore.Client, run_id: str, *, timeout: float
) -> Callable[[], FlowRunDocument | None]:
    """A function reading `flow_runs/{runId}` as it is now (None: no such document), each
    read bounded by `timeout` seconds and retried within it."""
    from worker_chart_export.adapters.firestore import bounded_retry
    from worker_chart_export.core.documents import as_flow_run
    from worker_chart_export.core.naming import FLOW_RUNS_COLLECTION

    reference = client.collection(FLOW_RUNS_COLLECTION).document(run_id)

    def read() -> FlowRunDocument | None:
        snapshot = reference.get(retry=bounded_retry(timeout), timeout=timeout)
        return as_flow_run(snapshot.to_dict() or {}) if snapshot.exists else None

    return read


def template_catalog(client: firestore.Client, collection: str) -> FirestoreTemplateCatalog:
    from worker_chart_export.adapters.firestore.template_catalog import FirestoreTemplateCatalog

    return FirestoreTemplateCatalog(client, collection)


# --- GCS for the view of a gs:// manifest


def storage_client() -> storage.Client:
    """A GCS client from the environment (STORAGE_EMULATOR_HOST: fake-gcs-server, anonymous)."""
    from worker_chart_export.adapters.gcs import make_storage_client

    return make_storage_client(None)
