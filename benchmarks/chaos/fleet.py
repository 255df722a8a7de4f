"""The served fleet the chaos benchmark runs on, and the process chaos it suffers.

`ChaosStack` is the dev stack (worker_chart_export.tools.devstack.stack.LocalStack: the
Firestore emulator with its real triggers, fake-gcs-server, advance_flow and the reaper each
served in its own process, the reaper schedule) with, instead of its router and one worker:

- `INSTANCES` served workers (`worker-0`..), behind the Eventarc front end (chaos/eventarc.py),
  which the emulator's triggers reach directly;
- the chaos CHART-IMG stand-in in its own process (chaos/stand_in.py), the accounts' keys;
- the templates of a folder synced by the worker's own `templates sync` (its validation);
- `kill(name)` (SIGKILL of the instance's process group: no finalize, no cleanup) and
  `restart(name)` (a new process on the same port, its own log), `pause_firestore()` and
  `resume_firestore()` (SIGSTOP / SIGCONT of the emulator's JVM), `edit_template()`.

Every instance's incarnation keeps its log file and the moment it started; a killed one, the
units its log shows in hand as it died.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos.eventarc import Eventarc, Instance, Service
from chaos.schedule import edited_request
from chaos.stand_in import ChaosStandInProcess
from e2e.multi_instance import StandInAccount
from harness.chaos_stand_in import INITIAL
from worker_chart_export.core.naming import moment_of
from worker_chart_export.environment import (
    CHART_CONCURRENCY,
    CHART_IMG_ACCOUNTS_JSON,
    CHART_IMG_BASE_URL,
    CHART_IMG_REQUEST_TIMEOUT_SECONDS,
    CHARTS_API_MODE,
    STEP_MAX_ATTEMPTS,
    STEP_RETRY_BASE_SECONDS,
    STEP_RETRY_MAX_SECONDS,
    THREADS,
)
from worker_chart_export.tools.devstack import services
from worker_chart_export.tools.devstack.processes import Child, StackError, free_port, listening, wait_for
from worker_chart_export.tools.devstack.stack import (
    ADVANCE_TARGET,
    REAPER_TARGET,
    WORKER_TARGET,
    LocalStack,
    StackOptions,
)

WORKER_TRIGGER, ADVANCE_TRIGGER = "chart-worker", "advance-flow"
TEMPLATES = "chart_templates"
TIMEZONE = "Etc/UTC"  # CHARTS_DEFAULT_TIMEZONE: what a template without one is sent with


@dataclass(frozen=True)
class FleetConfig:
    instances: int = 3
    threads: int = 4  # Cloud Run concurrency = gunicorn threads, as deploy.sh sets them
    chart_concurrency: int = 4
    request_timeout: float = 30.0  # the lease: a killed instance's step comes back after it
    finalize_budget: float = 8.0
    chart_img_timeout: float = 10.0
    reaper_interval: float = 3.0  # Cloud Scheduler's, compressed as the schedule is
    latency: float = 0.5  # the stand-in's, per chart: steps last long enough for a kill to meet one
    # A step a window kept from minImages waits and is claimed again (core/step/patience.py).
    # Its waits, 10 s doubling to 60 s over 10 attempts (10 + 20 + 40 + 6 x 60 = 430 s, each
    # attempt's own budget besides), outlast the longest window, the full mode's outage of
    # 290-310 s, by more than 2 minutes, so no window is longer than a step's attempts allow
    # and every step it met comes back after it; and the first waits are short, so the short
    # windows' steps come back within the settling. The reaper (every 3 s) makes a step READY
    # at most a pass after its wait ends.
    step_retry_base: float = 10.0
    step_retry_max: float = 60.0
    step_max_attempts: int = 10

    def step_span(self) -> float:
        """The seconds a step's attempts cover at most: its waits between them (without their
        jitter) and each attempt's budget for its charts (the request's timeout less the
        finalize's): a window longer than this is longer than its attempts allow."""
        waits = sum(
            min(self.step_retry_max, self.step_retry_base * 2**n) for n in range(self.step_max_attempts - 1)
        )
        return waits + self.step_max_attempts * (self.request_timeout - self.finalize_budget)


@dataclass
class Incarnation:
    name: str
    generation: int
    child: Child
    started: datetime
    killed: bool = False  # SIGKILLed by the schedule: whatever it held died with it

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        with contextlib.suppress(OSError):
            for raw in self.child.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    lines.append(json.loads(raw))
        return lines


@dataclass(frozen=True)
class TemplateVersion:
    template_id: str
    label: str  # as the stand-in knows it: "initial", or the edit's window ("template_edit#2")
    since: datetime  # its update time in Firestore
    request: dict[str, Any]


class ChaosStack(LocalStack):
    def __init__(
        self, config: FleetConfig, accounts: list[StandInAccount], templates_dir: Path, log_dir: Path
    ) -> None:
        super().__init__(
            StackOptions(
                request_timeout_seconds=config.request_timeout,
                finalize_budget_seconds=config.finalize_budget,
                reaper_interval_seconds=config.reaper_interval,
                log_dir=log_dir,
            )
        )
        self.config = config
        self.accounts = accounts
        self.templates_dir = templates_dir
        self.incarnations: list[Incarnation] = []
        self.template_versions: list[TemplateVersion] = []
        self.stand_in: ChaosStandInProcess | None = None
        self.eventarc: Eventarc | None = None
        self._emulator: Child | None = None
        self._worker_ports = {f"worker-{i}": free_port() for i in range(config.instances)}
        self._restarting = threading.Lock()

    # --- lifecycle

    def _start(self) -> None:
        firestore_port, gcs_port, eventarc_port = free_port(), free_port(), free_port()
        self.emulator_host, self.gcs_url = f"127.0.0.1:{firestore_port}", f"http://127.0.0.1:{gcs_port}"
        self.stand_in = ChaosStandInProcess(
            self.accounts, latency=self.config.latency, templates_dir=self.templates_dir
        )
        self.options.extra_env = self._real_mode_env(self.stand_in.base_url)
        self._function_env = self._build_function_env()
        with ThreadPoolExecutor(max_workers=7) as pool:
            emulator = pool.submit(
                services.start_firestore_emulator,
                self.supervisor,
                firestore_port,
                f"127.0.0.1:{eventarc_port}",
            )
            starting: list[Future[Any]] = [
                pool.submit(self._start_storage_then_workers, gcs_port, pool),
                *(pool.submit(self.start_function, t) for t in (ADVANCE_TARGET, REAPER_TARGET)),
            ]
            self._emulator = emulator.result()
            for future in starting:
                future.result()
        self._sync_templates()
        self.eventarc = self._front_end().start(eventarc_port)
        for trigger, event_type in (
            (WORKER_TRIGGER, services.UPDATED_EVENT),
            (ADVANCE_TRIGGER, services.WRITTEN_EVENT),
        ):
            services.register_trigger(self.emulator_host, self.project, trigger, event_type)
        self._reaper_thread = threading.Thread(
            target=self._reaper_schedule, name="reaper-schedule", daemon=True
        )
        self._reaper_thread.start()

    def _start_storage_then_workers(self, gcs_port: int, pool: ThreadPoolExecutor) -> None:
        """The workers wait for their bucket: `serve` checks it can write there before it serves."""
        services.start_fake_gcs(self.supervisor, gcs_port)
        services.create_bucket(self.gcs_url, self.bucket, self.project)
        for future in [pool.submit(self.restart, name) for name in self._worker_ports]:
            future.result()

    def _real_mode_env(self, base_url: str) -> dict[str, str]:
        return {
            CHARTS_API_MODE: "real",
            CHART_IMG_BASE_URL: base_url,
            CHART_IMG_ACCOUNTS_JSON: json.dumps([a.accounts_json_entry() for a in self.accounts]),
            CHART_IMG_REQUEST_TIMEOUT_SECONDS: str(self.config.chart_img_timeout),
            THREADS: str(self.config.threads),
            CHART_CONCURRENCY: str(self.config.chart_concurrency),
            STEP_MAX_ATTEMPTS: str(self.config.step_max_attempts),
            STEP_RETRY_BASE_SECONDS: str(self.config.step_retry_base),
            STEP_RETRY_MAX_SECONDS: str(self.config.step_retry_max),
        }

    def _front_end(self) -> Eventarc:
        # Cloud Run cuts a request at its timeout; the worker ends its own before: a margin, so
        # only an instance that hangs (a paused Firestore under it) meets this one
        timeout = self.config.request_timeout + 10.0
        workers = [Instance(name, port) for name, port in self._worker_ports.items()]
        advance = Instance("advance_flow", self.functions[ADVANCE_TARGET].port)
        return Eventarc(
            {
                WORKER_TRIGGER: Service("worker", workers, self.config.threads, timeout),
                ADVANCE_TRIGGER: Service("advance_flow", [advance], self.config.threads, timeout),
            }
        )

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.resume_firestore()
        if self.eventarc is not None:
            self.eventarc.stop()
        super().stop()
        if self.stand_in is not None:
            self.stand_in.stop()

    def _sync_templates(self) -> None:
        """The folder's templates through the worker's own `templates sync` (its validation)."""
        from worker_chart_export.tools.templates_sync import sync_templates

        report = sync_templates(self.templates_dir, self.db, dry_run=False)
        if not report.ok:
            raise StackError(report.to_text())
        for snapshot in self.db.collection(TEMPLATES).stream():
            document = snapshot.to_dict() or {}
            self.template_versions.append(
                TemplateVersion(snapshot.id, INITIAL, snapshot.update_time, document["request"])
            )

    # --- process chaos

    def kill(self, name: str) -> None:
        """SIGKILL the instance's whole process group: a crash, requests in flight lost."""
        assert self.eventarc is not None
        self.eventarc.services[WORKER_TRIGGER].set_up(name, False)
        incarnation = self.current(name)
        incarnation.killed = True
        child = incarnation.child
        child.kill()
        with contextlib.suppress(Exception):
            child.process.wait(timeout=10)
        self.supervisor.forget(child)

    def restart(self, name: str) -> Incarnation:
        """A new process of the instance on its port, with a log of its own."""
        with self._restarting:
            generation = 1 + sum(1 for i in self.incarnations if i.name == name)
        port = self._worker_ports[name]
        command = services.function_command(WORKER_TARGET, port)
        child = self.supervisor.start(f"{name}.{generation}", command, env=self._function_env)
        wait_for(lambda: listening(port), child=child, timeout=services.START_TIMEOUT_SECONDS, what=name)
        incarnation = Incarnation(name, generation, child, datetime.now(UTC))
        with self._restarting:
            self.incarnations.append(incarnation)
        if self.eventarc is not None:
            self.eventarc.services[WORKER_TRIGGER].set_up(name, True)
        return incarnation

    def current(self, name: str) -> Incarnation:
        with self._restarting:
            return [i for i in self.incarnations if i.name == name][-1]

    def pause_firestore(self) -> None:
        assert self._emulator is not None
        os.killpg(self._emulator.pid, signal.SIGSTOP)

    def resume_firestore(self) -> None:
        if self._emulator is not None:
            os.killpg(self._emulator.pid, signal.SIGCONT)

    def edit_template(self, template_id: str, number: int, label: str) -> TemplateVersion:
        """Edit `number` of the template, written as an operator would (the stand-in told first,
        so it names the edited request's calls, and their version, `label`)."""
        assert self.stand_in is not None
        reference = self.db.collection(TEMPLATES).document(template_id)
        request = edited_request((reference.get().to_dict() or {})["request"], number)
        self.stand_in.control(
            "register_template",
            template=template_id,
            request={"timezone": TIMEZONE, **request},
            version=label,
        )
        written = reference.update({"request": request})
        since = moment_of(written.update_time) or datetime.now(UTC)
        version = TemplateVersion(template_id, label, since, request)
        self.template_versions.append(version)
        return version
