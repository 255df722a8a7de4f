"""Where configuration meets adapters: the one package that reads `Settings` to build ports.

A process has one `Runtime` (`runtime()`), built around the settings, one Clock and one
Firestore client. The functions take their parts from it, each part built on first use and
kept while the instance is warm: `step()` for on_flow_run_updated (ports, limits, clock),
`advance_store()` for advance_flow (Firestore only: no CHART-IMG accounts, no GCS, no chart
API), `reaper()` for the reaper. The CLI's `advance` and `reap` take theirs from a Runtime
around a checked client (`cli_runtime`); run-local builds its own step on local files
(`local_step`). How each part is built from the settings: `builders.py`; the chart API and
its accounts: `chart_api.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from worker_chart_export.bootstrap.builders import (
    LocalLayout,
    LocalStep,
    StepParts,
    check_configuration,
    local_step,
    served_step,
    step_limits,
    template_plans,
)
from worker_chart_export.bootstrap.chart_api import (
    account_defaults,
    build_chart_api,
    calls_chart_img,
    chart_img_options,
    configured_accounts,
)
from worker_chart_export.core.clock import SYSTEM_CLOCK, Clock
from worker_chart_export.settings import Settings, load_settings

if TYPE_CHECKING:
    from google.cloud import firestore

    from worker_chart_export.adapters.firestore import FirestoreFlowRunStore
    from worker_chart_export.service.reaper import LeaseReaper

__all__ = [
    "LocalLayout",
    "LocalStep",
    "ReaperParts",
    "Runtime",
    "StepParts",
    "account_defaults",
    "build_chart_api",
    "calls_chart_img",
    "chart_img_options",
    "check_configuration",
    "cli_runtime",
    "configured_accounts",
    "local_step",
    "runtime",
    "step_limits",
    "template_plans",
    "warm_up",
]

Part = TypeVar("Part")


@dataclass(frozen=True)
class ReaperParts:
    """What reap_once is handed: the lease store, the clock, the attempts a step may have."""

    leases: LeaseReaper
    clock: Clock
    max_attempts: int


class _Once(Generic[Part]):
    """A part built by its first caller and kept; callers meanwhile wait for that one build
    (a build that failed is tried again by the next caller)."""

    def __init__(self, build: Callable[[], Part]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._built: list[Part] = []

    def get(self) -> Part:
        with self._lock:
            if not self._built:
                self._built.append(self._build())
            return self._built[0]


class Runtime:
    """The settings, one Clock, one Firestore client, and the parts built from them on first
    use. `open_firestore`: how the client is had when a part first needs it (the CLI's: one
    already checked); by default, made from the settings."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        open_firestore: Callable[[], firestore.Client] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._firestore = _Once(open_firestore or self._open_firestore)
        self._step = _Once(lambda: served_step(settings, self.firestore_client(), clock))
        self._advance_store = _Once(self._build_advance_store)
        self._reaper = _Once(self._build_reaper)

    def firestore_client(self) -> firestore.Client:
        return self._firestore.get()

    def step(self) -> StepParts:
        return self._step.get()

    def advance_store(self) -> FirestoreFlowRunStore:
        return self._advance_store.get()

    def reaper(self) -> ReaperParts:
        return self._reaper.get()

    def usage_documents(self) -> dict[str, Mapping[str, Any]]:
        """Every `chart_img_accounts_usage/` document as it is now (the `accounts` report)."""
        from worker_chart_export.adapters.firestore import FirestoreUsageStore

        return FirestoreUsageStore(self.firestore_client(), clock=self.clock).read_all()

    def _open_firestore(self) -> firestore.Client:
        from worker_chart_export.adapters.firestore import make_firestore_client

        project, emulator = self.settings.google_cloud_project, self.settings.firestore_emulator_host
        return make_firestore_client(project, emulator_host=emulator)

    def _build_advance_store(self) -> FirestoreFlowRunStore:
        from worker_chart_export.adapters.firestore import FirestoreFlowRunStore

        return FirestoreFlowRunStore(self.firestore_client(), clock=self.clock)

    def _build_reaper(self) -> ReaperParts:
        from worker_chart_export.adapters.firestore.leases import FirestoreLeaseReaper

        leases = FirestoreLeaseReaper(self.firestore_client())
        return ReaperParts(leases, self.clock, self.settings.step_max_attempts)


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """The process's one Runtime, made from the environment and the system clock by the
    first caller (cheap: its parts are built when first asked for)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(load_settings(), SYSTEM_CLOCK)
        return _runtime


@contextmanager
def cli_runtime(settings: Settings) -> Iterator[Runtime]:
    """A Runtime for a CLI command that acts on Firestore, around a client that answered a
    first short read and is closed at the end; every failure is one line (UsageError)."""
    from worker_chart_export.adapters.firestore.checked_client import cli_firestore

    with cli_firestore(settings.google_cloud_project, settings.firestore_emulator_host) as client:
        yield Runtime(settings, SYSTEM_CLOCK, open_firestore=lambda: client)


def warm_up() -> float:
    """What the first step would pay for, paid right after the instance starts: the heavy
    imports, the step's parts (`runtime().step()`), their connections, and the bucket's write
    check (an ERROR line when it fails: every step would then answer 503). Meant for a background
    thread of the serving process; an event with work meanwhile waits for the step's lock
    rather than building a second one, and a no-op event does not wait at all. Returns the
    seconds it took; failures are logged and left for the first step to meet again."""
    import time

    from worker_chart_export.core.exceptions import ConfigError
    from worker_chart_export.logs import get_logger

    began = time.monotonic()
    try:
        import worker_chart_export.service.execute  # noqa: F401  (the handler's lazy import, paid now)

        runtime().step().connect()
    except ConfigError as exc:
        # the bucket cannot store anything: each step will answer 503 before its claim
        get_logger().error("instance warm-up failed: configuration", setting=exc.setting, reason=str(exc))
        return time.monotonic() - began
    except Exception as exc:
        get_logger().warning("instance warm-up failed", errorKind=type(exc).__name__, reason=str(exc)[:200])
        return time.monotonic() - began
    took = time.monotonic() - began
    get_logger().info("instance warmed up", durationMs=round(took * 1000))
    return took
