"""Several served workers sharing one Firestore emulator, one fake-gcs-server and one
CHART-IMG stand-in, each in a process of its own, as a scaled-out Cloud Run service runs.

The emulator's trigger delivers to one URL only, so the tests (and the benchmarks) deliver
events themselves: the binary-mode protobuf CloudEvent Eventarc sends, POSTed to whichever
instance they choose. A POST returns when the instance has handled the event (the step
runs inside the request), so the caller knows when each step is done.

Used by tests/e2e/test_multi_instance.py and by benchmarks/bench_served_step.py and
bench_shared_basic.py (which put tests/ on sys.path).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib import request

from e2e.stack import Worker, start_worker
from harness.builders import REPO
from harness.chart_img_server import ADMIN_REQUESTS_PATH, new_key
from harness.firestore_emulator import FirestoreEmulator, free_port
from worker_chart_export.testing import binary_update_event

if TYPE_CHECKING:
    from google.cloud import firestore, storage

STAND_IN_SCRIPT = REPO / "tests" / "harness" / "chart_img_server.py"
EVENT_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class StandInAccount:
    """One CHART-IMG account as both sides know it: the stand-in enforces rate/burst/quota
    (None = unlimited), the workers' account config says `config` (plan, limits)."""

    account_id: str
    rate: float | None = None
    burst: int = 1
    quota: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    key: str = field(default_factory=new_key)

    def spec(self) -> str:
        rate = "" if self.rate is None else str(self.rate)
        quota = "" if self.quota is None else str(self.quota)
        return f"{self.account_id}={self.key}:{rate}:{self.burst}:{quota}"

    def accounts_json_entry(self) -> dict[str, Any]:
        return {"id": self.account_id, "apiKey": self.key, **self.config}


class StandInProcess:
    """tests/harness/chart_img_server.py in a process of its own (serve_from_stdin mode)."""

    def __init__(
        self,
        accounts: Sequence[StandInAccount],
        *,
        latency: float = 0.0,
        templates_dir: Path | None = None,
        script: Path = STAND_IN_SCRIPT,  # or a stand-in built on it (its first line: the URL)
        extra_args: Sequence[str] = (),
    ) -> None:
        command = [sys.executable, str(script), f"--latency={latency}", *extra_args]
        command += [f"--account={account.spec()}" for account in accounts]
        if templates_dir is not None:
            command.append(f"--templates-dir={templates_dir}")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "tests")},
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"the CHART-IMG stand-in did not start (printed {self.base_url!r})")

    def requests(self) -> list[dict[str, Any]]:
        """The request log: account_id, arrived (monotonic), template, status, message."""
        with request.urlopen(self.base_url + ADMIN_REQUESTS_PATH, timeout=10) as reply:
            log: list[dict[str, Any]] = json.loads(reply.read())
        return log

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
                self.process.communicate("", timeout=10)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)


def post_event(worker: Worker, body: bytes, headers: dict[str, str]) -> int:
    """POST one event to an instance; returns its HTTP status once the event is handled."""
    try:
        with request.urlopen(
            request.Request(worker.base_url + "/", data=body, headers=headers), timeout=EVENT_TIMEOUT_SECONDS
        ) as reply:
            return int(reply.status)
    except request.HTTPError as error:
        return int(error.code)


@dataclass
class MultiInstanceStack:
    emulator: FirestoreEmulator
    firestore: firestore.Client
    storage: storage.Client
    bucket: str
    stand_in: StandInProcess
    workers: list[Worker]
    # the update time of each run as created: its events carry it, as Eventarc's do
    created: dict[str, datetime] = field(default_factory=dict)

    def flow_run_ref(self, run_id: str) -> firestore.DocumentReference:
        return self.firestore.collection("flow_runs").document(run_id)

    def create_run(self, run_id: str, document: dict[str, Any]) -> None:
        self.created[run_id] = self.flow_run_ref(run_id).set(document).update_time

    def event(self, run_id: str, document: dict[str, Any], event_id: str) -> tuple[bytes, dict[str, str]]:
        """The update event of a run created here, as Eventarc delivers it (with the version)."""
        return binary_update_event(
            self.emulator.project, run_id, document, event_id, update_time=self.created.get(run_id)
        )

    def deliver(
        self, worker: Worker, run_id: str, document: dict[str, Any], event_id: str | None = None
    ) -> int:
        return post_event(worker, *self.event(run_id, document, event_id or f"evt-{uuid.uuid4().hex}"))

    def deliver_at_once(self, deliveries: Sequence[tuple[Worker, str, dict[str, Any], str]]) -> list[int]:
        """(worker, run_id, document, event_id) each POSTed from its own thread, together."""
        events = [(w, *self.event(r, d, e)) for w, r, d, e in deliveries]
        with ThreadPoolExecutor(max_workers=len(events)) as pool:
            return list(pool.map(lambda item: post_event(*item), events))

    def usage(self, account_id: str) -> dict[str, Any]:
        return (
            self.firestore.collection("chart_img_accounts_usage").document(account_id).get().to_dict() or {}
        )

    def manifest(self, run_id: str, step_id: str) -> dict[str, Any]:
        blob = self.storage.bucket(self.bucket).blob(f"charts/{run_id}/{step_id}/manifest.json")
        manifest: dict[str, Any] = json.loads(blob.download_as_bytes())
        return manifest

    def log_lines(self, message: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """Lines with this message from every instance (optionally of one run)."""
        return [
            line
            for worker in self.workers
            for line in worker.log_lines()
            if line.get("message") == message and (run_id is None or line.get("runId") == run_id)
        ]


def write_templates(client: firestore.Client, folder: Path) -> list[str]:
    """Every template of `folder` into chart_templates/{id}; their ids."""
    ids = []
    for path in sorted(folder.glob("*.json")):
        template = json.loads(path.read_text(encoding="utf-8"))
        client.collection("chart_templates").document(template["id"]).set(template)
        ids.append(template["id"])
    return ids


def template_copies(
    folder: Path, count: int, base: Path = REPO / "chart-templates" / "price_psar_adi_v1.json"
) -> list[str]:
    """`count` distinct templates (ids tpl_00.., distinct widths so the stand-in can tell
    their requests apart) written into `folder`; their ids."""
    template = json.loads(base.read_text(encoding="utf-8"))
    ids = []
    for i in range(count):
        template_id = f"tpl_{i:02d}"
        request_body = {**template["request"], "width": 800 - 8 * i}  # 400 <= width <= 800
        copy = {**template, "id": template_id, "request": request_body}
        (folder / f"{template_id}.json").write_text(json.dumps(copy), encoding="utf-8")
        ids.append(template_id)
    return ids


def worker_env(
    emulator: FirestoreEmulator,
    gcs_url: str,
    bucket: str,
    stand_in: StandInProcess,
    accounts: Sequence[StandInAccount],
) -> dict[str, str]:
    return {
        "FIRESTORE_EMULATOR_HOST": emulator.host,
        "STORAGE_EMULATOR_HOST": gcs_url,
        "GOOGLE_CLOUD_PROJECT": emulator.project,
        "CHARTS_BUCKET": bucket,
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": stand_in.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps([a.accounts_json_entry() for a in accounts]),
        "APP_ENV": "e2e",
    }


def start_instances(count: int, env: dict[str, str], *, command: Sequence[str] | None = None) -> list[Worker]:
    """`count` served workers with the same configuration, started in parallel."""
    logs = []
    for _ in range(count):
        fd, name = tempfile.mkstemp(prefix="worker-multi-", suffix=".log")
        os.close(fd)
        logs.append(Path(name))
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda log: start_worker(free_port(), env, log, command=command), logs))


@contextmanager
def running_instances(
    emulator: FirestoreEmulator,
    gcs_url: str,
    accounts: Sequence[StandInAccount],
    *,
    instances: int = 3,
    latency: float = 0.0,
    templates_dir: Path = REPO / "chart-templates",
    extra_env: dict[str, str] | None = None,
    command: Sequence[str] | None = None,
) -> Iterator[MultiInstanceStack]:
    """Emptied emulator, templates of `templates_dir` written, a fresh bucket, a stand-in
    knowing `accounts`, and `instances` served workers configured alike; all stopped on exit."""
    from google.cloud import firestore

    from harness.gcs_emulator import storage_client_for

    emulator.reset()
    client = firestore.Client(project=emulator.project)  # FIRESTORE_EMULATOR_HOST is the test's
    storage_client = storage_client_for(gcs_url)
    bucket = f"multi-{uuid.uuid4().hex[:12]}"
    storage_client.create_bucket(bucket)
    write_templates(client, templates_dir)
    stand_in = StandInProcess(accounts, latency=latency, templates_dir=templates_dir)
    workers: list[Worker] = []
    try:
        env = worker_env(emulator, gcs_url, bucket, stand_in, accounts) | (extra_env or {})
        workers = start_instances(instances, env, command=command)
        yield MultiInstanceStack(emulator, client, storage_client, bucket, stand_in, workers)
    finally:
        for worker in workers:
            worker.stop()
            with contextlib.suppress(OSError):
                worker.log_path.unlink()
        stand_in.stop()
        client.close()
