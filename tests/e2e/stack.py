"""The whole chain on this machine: Firestore emulator trigger -> served worker -> GCS emulator.

`running_e2e_stack` is fake-gcs-server (the session's), a Firestore emulator started with
`--functions_emulator` pointing at the worker and an update trigger on `flow_runs/{runId}`,
and the worker itself started as `worker-chart-export serve --port <p>` in mock mode, its
JSON log lines captured in a file the tests read.

No conftest.py here on purpose: unit tests import their conftest by module name
(`from conftest import ...`), and another top-level conftest would shadow theirs when both
directories are collected in one run. Test modules wrap the stack in their own fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.builders import TEMPLATES_DIR, load_templates
from harness.firestore_emulator import (
    FirestoreEmulator,
    free_port,
    register_update_trigger,
    start_firestore_emulator,
)
from harness.gcs_emulator import GcsEmulator, storage_client_for
from harness.processes import stop_process_group

if TYPE_CHECKING:
    from google.cloud import firestore, storage

# env the worker must not inherit from the test process: the stack sets its own
_STACK_ENV = (
    "FIRESTORE_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_CLOUD_PROJECT",
    "CHARTS_BUCKET",
    "CHARTS_API_MODE",
    "CHART_IMG_ACCOUNTS_JSON",
    "CHART_IMG_BASE_URL",
    "APP_ENV",
    "PORT",
)


def wait_until(
    condition: Callable[[], Any], *, what: str, interval: float = 0.1, timeout: float | None = None
) -> Any:
    """Poll until `condition()` is truthy and return its value. The condition is the system's
    own event (a document's state in the emulator, a log line, a request the stand-in logged),
    so a busy machine makes a wait longer, never decides it: in a test, pytest-timeout
    (pyproject) ends one that never comes, and the failure names `what`. `timeout` is for
    callers outside pytest (benchmarks) only; no test passes one."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while not (value := condition()):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)
    except BaseException as stopped:  # pytest-timeout's failure too
        stopped.add_note(f"while waiting for {what}")
        raise
    return value


@dataclass
class Worker:
    """The served worker process and its log file (one JSON object per line)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # gunicorn's own plain-text lines
                lines.append(json.loads(raw))
        return lines

    def lines_for(self, run_id: str, message: str | None = None) -> list[dict[str, Any]]:
        return [
            line
            for line in self.log_lines()
            if line.get("runId") == run_id and (message is None or line.get("message") == message)
        ]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def stop(self) -> None:
        stop_process_group(self.process, grace=10)  # gunicorn stops its worker too


def worker_command(port: int, command: Sequence[str] | None = None) -> list[str]:
    """`worker-chart-export serve --port <port>`, or `command` + `--port <port>` (e.g. a
    benchmark's launcher that instruments the same CLI)."""
    if command is not None:
        return [*command, "--port", str(port)]
    script = shutil.which("worker-chart-export", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.fail(
            "console script worker-chart-export not installed next to the interpreter (pip install -e .)",
            pytrace=False,
        )
    return [script, "serve", "--port", str(port)]


def start_worker(
    port: int, env_overrides: dict[str, str], log_path: Path, *, command: Sequence[str] | None = None
) -> Worker:
    env = {name: value for name, value in os.environ.items() if name not in _STACK_ENV}
    env.update(env_overrides)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            worker_command(port, command),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = Worker(process, port, log_path)
    # until it listens or exits: a start that hangs is ended by pytest-timeout (pyproject)
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"worker exited with {process.returncode}:\n{worker.log_tail()}", pytrace=False)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return worker
            except OSError:
                time.sleep(0.1)
    except BaseException as stopped:
        if process.poll() is None:
            worker.stop()
            stopped.add_note(f"the worker never listened on {port}:\n{worker.log_tail()}")
        raise


@dataclass
class E2EStack:
    firestore_emulator: FirestoreEmulator
    firestore: firestore.Client
    storage: storage.Client
    bucket: str
    worker: Worker
    trigger_url: str

    def flow_run_ref(self, run_id: str) -> firestore.DocumentReference:
        return self.firestore.collection("flow_runs").document(run_id)

    def flow_run(self, run_id: str) -> dict[str, Any]:
        return self.flow_run_ref(run_id).get().to_dict() or {}

    def objects(self, prefix: str) -> list[str]:
        return sorted(blob.name for blob in self.storage.list_blobs(self.bucket, prefix=prefix))

    def read_object(self, path: str) -> bytes:
        return bytes(self.storage.bucket(self.bucket).blob(path).download_as_bytes())


def new_run_id(label: str) -> str:
    return f"e2e_{label}_{uuid.uuid4().hex[:10]}"


@contextmanager
def running_e2e_stack(gcs_emulator: GcsEmulator) -> Iterator[E2EStack]:
    """The stack, torn down (worker, then emulator) on exit. Wrapped by a module fixture."""
    from google.cloud import firestore

    worker_port = free_port()
    emulator = start_firestore_emulator(functions_emulator=f"127.0.0.1:{worker_port}")
    log_fd, log_name = tempfile.mkstemp(prefix="worker-e2e-", suffix=".log")
    os.close(log_fd)
    worker: Worker | None = None
    try:
        trigger_url = register_update_trigger(
            emulator, "flow-runs-updated", f"http://127.0.0.1:{worker_port}"
        )
        storage_client = storage_client_for(gcs_emulator.url)
        bucket = f"e2e-charts-{uuid.uuid4().hex[:12]}"
        storage_client.create_bucket(bucket)

        with pytest.MonkeyPatch.context() as env:  # the client reads it when it is built
            env.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
            firestore_client = firestore.Client(project=emulator.project)
        # templates first: the worker caches a missing template for minutes
        for template_id, template in load_templates().items():
            firestore_client.collection("chart_templates").document(template_id).set(template)
        assert load_templates(), f"no templates in {TEMPLATES_DIR}"

        worker = start_worker(
            worker_port,
            {
                "FIRESTORE_EMULATOR_HOST": emulator.host,
                "STORAGE_EMULATOR_HOST": gcs_emulator.url,
                "GOOGLE_CLOUD_PROJECT": emulator.project,
                "CHARTS_BUCKET": bucket,
                "CHARTS_API_MODE": "mock",
                "APP_ENV": "e2e",
            },
            Path(log_name),
        )
        try:
            yield E2EStack(emulator, firestore_client, storage_client, bucket, worker, trigger_url)
        finally:
            firestore_client.close()
    finally:
        if worker is not None:
            worker.stop()
        emulator.stop()
        with contextlib.suppress(OSError):
            Path(log_name).unlink()
