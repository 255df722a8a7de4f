"""The local stack: the Firestore emulator with real triggers, fake-gcs-server, the three
served functions (worker, advance_flow, reaper), the trigger router between them, and a
reaper schedule standing in for Cloud Scheduler. Used by `worker-chart-export stack up`
and by the end-to-end tests.

    emulator --(every trigger)--> router --chart-worker (updated)--> serve --target on_flow_run_updated
                                         \\-advance-flow (written)--> serve --target advance_flow
    reaper schedule (thread) --POST every few s--> serve --target reap_expired_leases
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from worker_chart_export import bundled
from worker_chart_export.environment import (
    APP_ENV,
    CHART_IMG_ACCOUNTS_JSON,
    CHART_IMG_BASE_URL,
    CHARTS_API_MODE,
    CHARTS_BUCKET,
    CHARTS_FIXTURES_DIR,
    FINALIZE_BUDGET_SECONDS,
    FIRESTORE_EMULATOR_HOST,
    GOOGLE_CLOUD_PROJECT,
    PORT,
    REQUEST_TIMEOUT_SECONDS,
)
from worker_chart_export.tools.devstack import services
from worker_chart_export.tools.devstack.processes import (
    Child,
    StackError,
    Supervisor,
    free_port,
    side_by_side,
)
from worker_chart_export.tools.devstack.router import TriggerRouter

if TYPE_CHECKING:
    from google.cloud import firestore

    from worker_chart_export.core.documents import FlowRunDocument

PROJECT = "demo-worker-chart-export"
STORAGE_EMULATOR_HOST = "STORAGE_EMULATOR_HOST"
WORKER_TARGET, ADVANCE_TARGET, REAPER_TARGET = "on_flow_run_updated", "advance_flow", "reap_expired_leases"
# trigger name (as registered on the emulator) -> the function it delivers to, and the events:
# advance_flow hears creations too (a created run starts by itself), the worker updates only
TRIGGERS = {
    "chart-worker": (WORKER_TARGET, services.UPDATED_EVENT),
    "advance-flow": (ADVANCE_TARGET, services.WRITTEN_EVENT),
}
# variables the functions must not inherit from the shell: the stack sets its own
_OWN_ENV = (
    FIRESTORE_EMULATOR_HOST,
    STORAGE_EMULATOR_HOST,
    GOOGLE_CLOUD_PROJECT,
    CHARTS_BUCKET,
    CHARTS_API_MODE,
    CHART_IMG_ACCOUNTS_JSON,
    CHART_IMG_BASE_URL,
    APP_ENV,
    PORT,
    "FUNCTION_TARGET",
)


@dataclass
class StackOptions:
    charts_api_mode: str = "mock"
    # Short: the step's lease is the request timeout, so a crashed worker's step comes back soon.
    request_timeout_seconds: float = 20.0
    finalize_budget_seconds: float = 5.0
    reaper_interval_seconds: float = 2.0
    fixtures_dir: Path | None = None  # mock mode's recorded answers (default: the bundled ones)
    log_dir: Path | None = None  # default: a new temporary folder
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class Function:
    target: str
    port: int
    child: Child

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class LocalStack:
    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self.log_dir = self.options.log_dir or Path(tempfile.mkdtemp(prefix="worker-chart-export-stack-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.supervisor = Supervisor(self.log_dir)
        self.router = TriggerRouter()
        self.project = PROJECT
        self.bucket = f"stack-charts-{secrets.token_hex(4)}"
        self.functions: dict[str, Function] = {}
        self.emulator_host = ""
        self.gcs_url = ""
        self.reaper_reports: list[dict[str, Any]] = []
        self._function_env: dict[str, str] = {}
        self._client: firestore.Client | None = None
        self._stop_reaper = threading.Event()
        self._reaper_thread: threading.Thread | None = None

    # --- lifecycle

    def start(self) -> LocalStack:
        """Start everything; on any failure, stop what was started and raise StackError.

        The start runs in a thread of its own while the calling thread waits: a Ctrl-C
        (KeyboardInterrupt in the waiting thread) stops the stack at once, whatever is
        starting; the starting thread then meets a stopped supervisor and ends by itself.
        """
        failures: list[BaseException] = []
        started = threading.Event()

        def start_all() -> None:
            try:
                self._start()
            except BaseException as exc:  # handed to the waiting thread
                failures.append(exc)
            finally:
                started.set()

        try:
            threading.Thread(target=start_all, name="stack-start", daemon=True).start()
            started.wait()  # a signal interrupts this wait (POSIX)
            if failures:
                raise failures[0]
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.router.start(free_port())
        firestore_port, gcs_port = free_port(), free_port()
        self.emulator_host = f"127.0.0.1:{firestore_port}"
        self.gcs_url = f"http://127.0.0.1:{gcs_port}"
        self._function_env = self._build_function_env()
        # The JVM, the Go server and three Python processes start side by side: the functions
        # connect to the emulators lazily, so their ports are all they need up front; only
        # the worker waits for its bucket, which `serve` checks before it serves.
        side_by_side(
            _warm_imports,
            lambda: services.start_firestore_emulator(self.supervisor, firestore_port, self._router_host),
            partial(self._start_storage_then_worker, gcs_port),
            *(partial(self.start_function, target) for target in (ADVANCE_TARGET, REAPER_TARGET)),
        )
        self._sync_templates()  # before any event: the worker caches a missing template for minutes
        for trigger, (target, event_type) in TRIGGERS.items():
            self.router.route(trigger, f"127.0.0.1:{self.functions[target].port}")
            services.register_trigger(self.emulator_host, self.project, trigger, event_type)
        self._reaper_thread = threading.Thread(
            target=self._reaper_schedule, name="reaper-schedule", daemon=True
        )
        self._reaper_thread.start()

    @property
    def _router_host(self) -> str:
        return f"127.0.0.1:{self.router.port}"

    def stop(self) -> int:
        """Stop everything started, the processes first, all at once; safe to call twice.
        Returns the number of process groups it stopped."""
        self._stop_reaper.set()
        groups = self.supervisor.stop_all()
        if self._reaper_thread is not None:
            self._reaper_thread.join(timeout=10)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()  # type: ignore[no-untyped-call]
            self._client = None
        self.router.stop()
        return groups

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the parts

    def _build_function_env(self) -> dict[str, str]:
        env = {name: value for name, value in os.environ.items() if name not in _OWN_ENV}
        env.update(
            {
                FIRESTORE_EMULATOR_HOST: self.emulator_host,
                STORAGE_EMULATOR_HOST: self.gcs_url,
                GOOGLE_CLOUD_PROJECT: self.project,
                CHARTS_BUCKET: self.bucket,
                CHARTS_API_MODE: self.options.charts_api_mode,
                APP_ENV: "stack",
                REQUEST_TIMEOUT_SECONDS: str(self.options.request_timeout_seconds),
                FINALIZE_BUDGET_SECONDS: str(self.options.finalize_budget_seconds),
            }
        )
        if self.options.fixtures_dir is not None:
            env[CHARTS_FIXTURES_DIR] = str(self.options.fixtures_dir)
        if self.options.charts_api_mode == "real":
            key = secrets.token_hex(16)
            _, base_url = services.start_chart_img_stand_in(self.supervisor, "stack", key)
            env[CHART_IMG_BASE_URL] = base_url
            env[CHART_IMG_ACCOUNTS_JSON] = json.dumps([{"id": "stack", "apiKey": key}])
        env.update(self.options.extra_env)
        return env

    def _start_storage_then_worker(self, gcs_port: int) -> None:
        services.start_fake_gcs(self.supervisor, gcs_port)
        services.create_bucket(self.gcs_url, self.bucket, self.project)
        self.start_function(WORKER_TARGET)

    def start_function(self, target: str) -> Function:
        """Serve `target` in its own process; a restart keeps the port, so routes hold."""
        previous = self.functions.get(target)
        port = previous.port if previous is not None else free_port()
        child = services.start_function(self.supervisor, target, port, self._function_env)
        function = self.functions[target] = Function(target, port, child)
        return function

    def crash_function(self, target: str) -> None:
        """SIGKILL the function's whole process group: no finalize, no cleanup (a crash)."""
        child = self.functions[target].child
        child.kill()
        child.process.wait(timeout=10)
        self.supervisor.forget(child)

    def _sync_templates(self) -> None:
        from worker_chart_export.tools.templates_sync import sync_templates

        report = sync_templates(bundled.chart_templates_dir(), self.db, dry_run=False)
        if not report.ok:
            raise StackError(report.to_text())

    def _reaper_schedule(self) -> None:
        """Cloud Scheduler's stand-in: POST the served reaper every few seconds."""
        while not self._stop_reaper.wait(self.options.reaper_interval_seconds):
            reaper = self.functions.get(REAPER_TARGET)
            if reaper is None:
                continue
            with contextlib.suppress(OSError, ValueError):
                status, body = services.http("POST", reaper.url + "/", b"{}", timeout=30)
                if status == 200:
                    self.reaper_reports.append(json.loads(body))

    # --- Firestore and GCS, as the stack's own client

    @property
    def db(self) -> firestore.Client:
        if self._client is None:
            from google.cloud import firestore

            with _environment({FIRESTORE_EMULATOR_HOST: self.emulator_host}):  # read when built
                self._client = firestore.Client(project=self.project)
        return self._client

    def flow_run_ref(self, run_id: str) -> firestore.DocumentReference:
        return self.db.collection("flow_runs").document(run_id)

    def write_flow_run(self, document: FlowRunDocument) -> str:
        """Create the run as a producer does (`submit`'s way: create-only, status PENDING);
        advance_flow's trigger hears the creation, and nothing else is written."""
        from worker_chart_export.bootstrap.commands import create_flow_run

        return create_flow_run(self.db, document)

    def objects(self, prefix: str) -> list[str]:
        status, body = services.http(
            "GET", f"{self.gcs_url}/storage/v1/b/{self.bucket}/o?prefix={quote(prefix)}"
        )
        if status != 200:
            raise StackError(f"listing gs://{self.bucket}/{prefix}: HTTP {status}")
        return sorted(item["name"] for item in json.loads(body).get("items", []))

    def read_object(self, name: str) -> bytes:
        url = f"{self.gcs_url}/download/storage/v1/b/{self.bucket}/o/{quote(name, safe='')}?alt=media"
        status, body = services.http("GET", url)
        if status != 200:
            raise StackError(f"reading gs://{self.bucket}/{name}: HTTP {status}")
        return body

    def download(self, prefix: str, destination: Path) -> list[Path]:
        """Copy the objects under `prefix` to destination/<bucket>/<name> (run-local's bucket
        mirror, which `worker-chart-export view` reads offline)."""
        written = []
        for name in self.objects(prefix):
            if ".." in name.split("/"):
                continue  # never write outside the mirror
            path = destination / self.bucket / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.read_object(name))
            written.append(path)
        return written


def _warm_imports() -> None:
    """The Firestore client and the template validator load while the emulator starts."""
    import google.cloud.firestore  # noqa: F401

    import worker_chart_export.tools.templates_sync  # noqa: F401


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
