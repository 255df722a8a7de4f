"""The real Firestore emulator (Google Cloud CLI component `cloud-firestore-emulator`).

Started straight from its jar (the `gcloud` wrapper leaves java running when killed), in
its own process group so that `stop()` takes the JVM with it. Facts it relies on are in
docs/design.md, "How it is tested". Never skipped: a missing jar or java fails the test loudly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from harness.broken_firestore import BrokenFirestore, broken_firestore
from harness.processes import stop_process_group
from harness.secret_scan import scan_text
from worker_chart_export.tools.devstack.services import (
    FIRESTORE_JAR,
    FIRESTORE_JAR_ENV,
    FIRESTORE_JVM_FLAGS,
    FIRESTORE_MAIN_CLASS,
)

if TYPE_CHECKING:
    from google.cloud import firestore

PROJECT = "demo-worker-chart-export"


class FirestoreEmulatorError(RuntimeError):
    """The emulator could not be started or did not answer."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http(method: str, url: str, body: bytes | None = None, timeout: float = 30.0) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


class FirestoreEmulator:
    """A running emulator. `host` is what FIRESTORE_EMULATOR_HOST wants: host:port, no scheme."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        project: str,
        log_path: Path,
        functions_emulator: str | None,
    ) -> None:
        self.process = process
        self.port = port
        self.project = project
        self.log_path = log_path
        self.functions_emulator = functions_emulator

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}"

    def output_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def reset(self) -> None:
        """Delete every document of `project` (the wrong project id would silently delete nothing)."""
        url = f"{self.base_url}/emulator/v1/projects/{self.project}/databases/(default)/documents"
        status, text = _http("DELETE", url, timeout=30.0)  # a just-started JVM on a busy machine is slow
        if status != 200:
            raise FirestoreEmulatorError(f"reset failed: HTTP {status}: {text[:300]}")

    def stop(self) -> None:
        stop_process_group(self.process)  # the JVM leads its own group (start_new_session)
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> FirestoreEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def emulator_jar() -> Path:
    jar = Path(os.environ.get(FIRESTORE_JAR_ENV) or FIRESTORE_JAR)
    if not jar.is_file():
        raise FirestoreEmulatorError(
            f"Firestore emulator jar not found at {jar}: install the Google Cloud CLI component "
            f"cloud-firestore-emulator (or point {FIRESTORE_JAR_ENV} at the jar)"
        )
    return jar


def start_firestore_emulator(
    *,
    port: int | None = None,
    functions_emulator: str | None = None,
    project: str = PROJECT,
    timeout: float | None = None,
    rules: Path | None = None,
) -> FirestoreEmulator:
    """Start the emulator and wait until `GET /` answers `Ok`, or fail as soon as it exits. In a
    test only pytest-timeout (pyproject) ends a start that hangs, so a slow JVM on a busy
    machine never errors a test; `timeout` is for callers outside pytest (benchmarks).

    `functions_emulator` (host:port) is where the emulator POSTs the CloudEvents of
    triggers registered with `register_update_trigger`. `rules`: a security rules file the
    emulator then applies to every client request (the server SDK's `Bearer owner` bypasses
    them, as server credentials do in production); without it, clients are not checked.
    """
    jar = emulator_jar()
    java = shutil.which("java")
    if java is None:
        raise FirestoreEmulatorError(
            "java not found on PATH: the Firestore emulator needs a JRE (e.g. openjdk-17-jre-headless)"
        )
    # A port found free may be taken by another process in the seconds the JVM needs to bind
    # it (a busy machine's other tests: once, 149 tests errored at the setup of one emulator):
    # a port chosen here is chosen again, a port the caller named is not.
    for attempt in range(1, PORT_ATTEMPTS + 1):
        try:
            return _start_on(port or free_port(), java, jar, project, timeout, functions_emulator, rules)
        except PortTakenError:
            if port is not None or attempt == PORT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


class PortTakenError(FirestoreEmulatorError):
    """The emulator's port was taken before it could bind it."""


PORT_ATTEMPTS = 3


def _start_on(
    port: int,
    java: str,
    jar: Path,
    project: str,
    timeout: float,
    functions_emulator: str | None,
    rules: Path | None,
) -> FirestoreEmulator:
    command = [
        java,
        *FIRESTORE_JVM_FLAGS,  # as `stack up` starts it
        "-cp",
        str(jar),
        FIRESTORE_MAIN_CLASS,
        "start",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    if functions_emulator:
        command.append(f"--functions_emulator={functions_emulator}")
    if rules is not None:
        command.append(f"--rules={rules}")
    # a file, not a pipe: nobody drains a pipe and a full one would block the JVM
    log_fd, log_name = tempfile.mkstemp(prefix="firestore-emulator-", suffix=".log")
    log: IO[bytes] = os.fdopen(log_fd, "wb")
    with log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    emulator = FirestoreEmulator(process, port, project, Path(log_name), functions_emulator)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            tail = emulator.output_tail()
            emulator.stop()
            error = PortTakenError if "Address already in use" in tail else FirestoreEmulatorError
            raise error(f"Firestore emulator exited with code {process.returncode} during start-up:\n{tail}")
        try:
            status, text = _http("GET", f"{emulator.base_url}/", timeout=1.0)
            if status == 200 and text.strip() == "Ok":
                return emulator
        except OSError:
            pass  # not listening yet
        if deadline is not None and time.monotonic() > deadline:
            tail = emulator.output_tail()
            emulator.stop()
            raise FirestoreEmulatorError(
                f"Firestore emulator did not answer on {emulator.host} within {timeout:.0f}s:\n{tail}"
            )
        time.sleep(0.1)


def register_update_trigger(emulator: FirestoreEmulator, name: str, target_base_url: str) -> str:
    """Register an Eventarc-style trigger for updates of `flow_runs/{runId}`.

    The emulator POSTs matching writes to the `--functions_emulator` it was started with, so
    `target_base_url` (e.g. http://127.0.0.1:8081) must name that same host:port. Returns the
    URL the events arrive at: `<target_base_url>/functions/projects/<project>/triggers/<name>`.
    Triggers cannot be deleted: restart the emulator to get rid of them.
    """
    target = urlsplit(target_base_url)
    if emulator.functions_emulator is None:
        raise FirestoreEmulatorError(
            "the emulator was started without functions_emulator: it has nowhere to send events"
        )
    if target.netloc != emulator.functions_emulator:
        raise FirestoreEmulatorError(
            f"target {target_base_url} is not the emulator's functions_emulator {emulator.functions_emulator}"
        )
    from worker_chart_export.tools.devstack.processes import StackError
    from worker_chart_export.tools.devstack.services import register_trigger as register

    try:
        register(emulator.host, emulator.project, name)
    except StackError as exc:
        raise FirestoreEmulatorError(str(exc)) from exc
    return f"{target_base_url.rstrip('/')}/functions/projects/{emulator.project}/triggers/{name}"


@pytest.fixture(scope="session")
def firestore_emulator() -> Iterator[FirestoreEmulator]:
    """One emulator per test session, started on first use; env points clients at it."""
    try:
        emulator = start_firestore_emulator()
    except FirestoreEmulatorError as exc:
        pytest.fail(str(exc), pytrace=False)
    env = pytest.MonkeyPatch()
    env.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
    env.setenv("GOOGLE_CLOUD_PROJECT", emulator.project)
    try:
        yield emulator
    finally:
        env.undo()
        emulator.stop()


@pytest.fixture(scope="session")
def _firestore_session_client(firestore_emulator: FirestoreEmulator) -> Iterator[firestore.Client]:
    # one client (one gRPC channel) per session: the first RPC of a channel costs ~0.6 s
    from google.cloud import firestore

    client = firestore.Client(project=firestore_emulator.project)
    yield client
    client.close()


@pytest.fixture
def firestore_client(
    firestore_emulator: FirestoreEmulator,
    _firestore_session_client: firestore.Client,
    request: pytest.FixtureRequest,
) -> Iterator[firestore.Client]:
    """A client on an emptied database; what the test left behind is scanned for API keys."""
    firestore_emulator.reset()
    yield _firestore_session_client
    scan_text(dump_documents(_firestore_session_client), f"{request.node.nodeid} [firestore documents]")


def dump_documents(client: firestore.Client) -> str:
    """Every document of every top-level collection, as text (for the leak scan)."""
    parts = []
    for collection in client.collections():
        for snapshot in collection.stream():
            parts.append(f"{snapshot.reference.path} {snapshot.to_dict()!r}")
    return "\n".join(parts)


@pytest.fixture
def unavailable_firestore() -> Iterator[BrokenFirestore]:
    """A Firestore that answers every call UNAVAILABLE, recording each call's deadline."""
    with broken_firestore("unavailable") as server:
        yield server


@pytest.fixture
def unreachable_firestore_client(
    monkeypatch: pytest.MonkeyPatch, unavailable_firestore: BrokenFirestore
) -> Iterator[firestore.Client]:
    """A client of `unavailable_firestore`: every RPC fails with UNAVAILABLE."""
    from google.cloud import firestore

    # The library reads FIRESTORE_EMULATOR_HOST when the client is built (anonymous, no TLS).
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", unavailable_firestore.host)
    client = firestore.Client(project=PROJECT)
    yield client
    client.close()
