"""Firestore for the CLI's commands (advance, reap, submit, accounts, templates sync): a client checked
with one short read before a command uses it, and every failure as one line naming the
problem and its fix (`UsageError`: exit 2).

The library's defaults suit a service, not a person at a shell: without credentials it ends
in a DefaultCredentialsError traceback, and it retries an unreachable host for 60 s. Here the
first RPC has a 5 s deadline, and what fails later in the command is one line too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from worker_chart_export.core.exceptions import TransientStoreError, UsageError
from worker_chart_export.environment import FIRESTORE_EMULATOR_HOST, GOOGLE_CLOUD_PROJECT

if TYPE_CHECKING:
    from google.cloud import firestore

PROBE_SECONDS = 5.0
# a document id nobody writes: reading it opens the channel and checks the credentials
PROBE_DOCUMENT = ("chart_templates", "cli-probe")
LOGIN = "run `gcloud auth application-default login`"
NO_CREDENTIALS = f"no Google Cloud credentials: {LOGIN}, or set {FIRESTORE_EMULATOR_HOST} for the emulator"
NO_PROJECT = (
    f"no Google Cloud project: set {GOOGLE_CLOUD_PROJECT} (the credentials name none), "
    f"or {FIRESTORE_EMULATOR_HOST} for the emulator"
)
_MAX_REASON_CHARS = 200
_NONE_FOUND = "Your default credentials were not found"  # google-auth's words when it found none


@contextmanager
def cli_firestore(project: str | None, emulator_host: str | None) -> Iterator[firestore.Client]:
    """A Firestore client that answered a first read within PROBE_SECONDS, closed on exit.
    Raises UsageError (one line) for missing credentials or project, an unreachable
    Firestore, a refusal, or a store failure inside the block."""
    client = _client(project, emulator_host)
    where = f"Firestore emulator at {emulator_host}" if emulator_host else f"Firestore of {client.project}"
    try:
        with _one_line(where):
            _probe(client, where, emulator_host)
            yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]  # firestore.Client.close has no annotations


def _client(project: str | None, emulator_host: str | None) -> firestore.Client:
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    from worker_chart_export.adapters.firestore import make_firestore_client

    try:
        return make_firestore_client(project, emulator_host=emulator_host)
    except DefaultCredentialsError as exc:
        if str(exc).startswith(_NONE_FOUND):
            raise UsageError(NO_CREDENTIALS) from None
        # e.g. GOOGLE_APPLICATION_CREDENTIALS names a file that is missing or not a key
        raise UsageError(f"Google Cloud credentials unusable ({_reason(exc)}): {LOGIN}") from None
    except GoogleAuthError as exc:
        raise UsageError(f"Google Cloud credentials unusable ({_reason(exc)}): {LOGIN}") from None
    except OSError:  # google-cloud-core: "Project was not passed and could not be determined"
        raise UsageError(NO_PROJECT) from None


def _probe(client: firestore.Client, where: str, emulator_host: str | None) -> None:
    """One read with a short deadline: the library would retry an unreachable host for 60 s."""
    from google.api_core.exceptions import GoogleAPIError

    from worker_chart_export.adapters.firestore import bounded_retry, is_transient

    collection, document = PROBE_DOCUMENT
    reference = client.collection(collection).document(document)
    try:
        reference.get(retry=bounded_retry(PROBE_SECONDS), timeout=PROBE_SECONDS)
    except GoogleAPIError as exc:
        if not is_transient(exc):
            raise  # a refusal: _one_line names it
        hint = "is the emulator running?" if emulator_host else "check the network, then try again"
        raise UsageError(f"{where} did not answer within {PROBE_SECONDS:.0f} s: {hint}") from None


@contextmanager
def _one_line(where: str) -> Iterator[None]:
    from google.api_core import exceptions as api_exceptions
    from google.auth.exceptions import GoogleAuthError

    try:
        yield
    except TransientStoreError as exc:  # the stores translate their outages and contention
        raise UsageError(f"{where}: {exc}") from None
    except GoogleAuthError as exc:  # e.g. a refresh token that was revoked
        raise UsageError(f"Google Cloud credentials were refused ({_reason(exc)}): {LOGIN}") from None
    except (api_exceptions.PermissionDenied, api_exceptions.Unauthenticated) as exc:
        raise UsageError(
            f"{where} refused the request ({_reason(exc)}): check {GOOGLE_CLOUD_PROJECT} and that "
            "the account may use Firestore (roles/datastore.user)"
        ) from None
    except api_exceptions.GoogleAPIError as exc:
        raise UsageError(f"{where}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MAX_REASON_CHARS:
        text = text[: _MAX_REASON_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
