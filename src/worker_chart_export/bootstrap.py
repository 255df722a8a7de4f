"""Where configuration meets adapters: the one module that reads `Settings` to build the
ports and the step's limits. Heavy client libraries are imported here, lazily, and only for
the adapters actually used. The chart-API mode is decided here, once (`calls_chart_img`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import (
    LocalArtifactStore,
    LocalFlowRunStore,
    LocalTemplateSource,
)
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import CHART_TEMPLATES_COLLECTION, is_safe_segment
from worker_chart_export.core.plans import plan_named
from worker_chart_export.core.retry_policy import RetryPolicy
from worker_chart_export.environment import (
    CHART_TEMPLATES_DIR,
    CHARTS_API_MODE,
    CHARTS_BUCKET,
    CHARTS_FIXTURES_DIR,
)
from worker_chart_export.service.ports import ArtifactStore, ChartApi, Ports, UsageStore
from worker_chart_export.settings import ChartsApiMode, Settings, load_settings

if TYPE_CHECKING:
    from google.cloud.storage import Client as StorageClient

    from worker_chart_export.adapters.accounts_config import AccountConfig, SecretClient
    from worker_chart_export.adapters.chart_img import ChartImgOptions, Seams
    from worker_chart_export.adapters.firestore import FirestoreFlowRunStore
    from worker_chart_export.service.reaper import LeaseReaper


@dataclass(frozen=True)
class Runtime:
    """What a warm instance keeps between events: the step's limits and the ports."""

    limits: StepLimits
    ports: Ports
    # Opens what the first step would otherwise open on its own time (gRPC channel, HTTP
    # connections, credentials); run once by warm_up(), never on the request path.
    connect: Callable[[], None] = field(default=lambda: None, compare=False)


def step_limits(settings: Settings) -> StepLimits:
    return StepLimits.within_request(
        settings.request_timeout_seconds,
        settings.finalize_budget_seconds,
        chart_concurrency=settings.chart_concurrency,
        default_timezone=settings.charts_default_timezone,
        plan=plan_named(settings.chart_img_plan),
    )


def calls_chart_img(settings: Settings) -> bool:
    """real and record call CHART-IMG (accounts, usage store, HTTP); mock reads fixtures only."""
    return settings.charts_api_mode is not ChartsApiMode.MOCK


def build_chart_api(
    settings: Settings,
    usage_store: UsageStore | None = None,
    *,
    secret_client: SecretClient | None = None,
    retry_policy: RetryPolicy | None = None,
    seams: Seams | None = None,
    steps_at_once: int | None = None,
) -> ChartApi:
    """The ChartApi for settings.charts_api_mode: the one place the mode is decided.
    Real and record need accounts and a usage store; mock needs neither. `steps_at_once`:
    how many steps share it at once (default the served instance's threads)."""
    library = FixtureLibrary(settings.charts_fixtures_dir)
    if not calls_chart_img(settings):
        # a wrong folder would fail every chart as "missing" (record mode creates its folder)
        _require_dir(settings.charts_fixtures_dir, CHARTS_FIXTURES_DIR)
        return MockChartApi(library)
    from worker_chart_export.adapters.chart_img import Seams, build_http_chart_api

    accounts = _require_accounts(settings, secret_client)
    if usage_store is None:
        raise ConfigError(CHARTS_API_MODE, f"{settings.charts_api_mode.value} mode needs a usage store")
    return build_http_chart_api(
        chart_img_options(settings, steps_at_once=steps_at_once),
        accounts,
        usage_store,
        record_into=library if settings.charts_api_mode is ChartsApiMode.RECORD else None,
        retry_policy=retry_policy,
        seams=seams or Seams(),
    )


def chart_img_options(settings: Settings, *, steps_at_once: int | None = None) -> ChartImgOptions:
    """What the HTTP chart API is built from. Its connections: one for every chart the
    process runs at once, i.e. steps at once (the instance's threads) x CHART_CONCURRENCY."""
    from worker_chart_export.adapters.chart_img import ChartImgOptions

    steps = settings.threads if steps_at_once is None else steps_at_once
    return ChartImgOptions(
        base_url=settings.chart_img_base_url,
        request_timeout_seconds=settings.chart_img_request_timeout_seconds,
        max_attempts=settings.chart_img_max_attempts,
        max_connections=steps * settings.chart_concurrency,
        daily_limit=settings.chart_img_daily_limit,
        rate_per_second=settings.chart_img_rate_per_second,
        burst=settings.chart_img_burst,
    )


def _require_accounts(
    settings: Settings, secret_client: SecretClient | None = None
) -> tuple[AccountConfig, ...]:
    from worker_chart_export.adapters.accounts_config import require_accounts

    return require_accounts(
        settings.chart_img_accounts_json,
        settings.chart_img_accounts_secret,
        settings.google_cloud_project,
        secret_client=secret_client,
    )


def check_configuration(settings: Settings) -> dict[str, object]:
    """What the first event with work would trip on, checked at start-up instead: a bad
    deployment then fails to start with a message naming the problem, rather than failing
    every event. Returns a key-free summary for the start-up log line."""
    summary: dict[str, object] = {
        "chartsApiMode": settings.charts_api_mode.value,
        "chartsBucket": settings.charts_bucket,
    }
    if calls_chart_img(settings):
        summary["chartImgAccounts"] = [account.id for account in _require_accounts(settings)]
    return summary


def gcs_artifacts(settings: Settings) -> ArtifactStore:
    return _gcs_artifacts_and_client(settings)[0]


def _gcs_artifacts_and_client(settings: Settings) -> tuple[ArtifactStore, StorageClient]:
    from google.auth.exceptions import DefaultCredentialsError

    from worker_chart_export.adapters.gcs import GcsArtifactStore, WritePolicy, make_storage_client

    try:
        client = make_storage_client(settings.google_cloud_project)
    except DefaultCredentialsError:
        raise ConfigError(
            CHARTS_BUCKET,
            f"bucket {settings.charts_bucket!r} is configured but no Google Cloud credentials "
            "were found (run `gcloud auth application-default login`, or set STORAGE_EMULATOR_HOST for an "
            "emulator, or leave the bucket unset to write to the local folder)",
        ) from None
    # Bounded so that one object's retries stay well inside the step's budget.
    store = GcsArtifactStore(client, settings.charts_bucket, policy=WritePolicy(max_attempts=3, timeout=15.0))
    return store, client


def build_production_ports(settings: Settings) -> Ports:
    return _build_production_runtime(settings).ports


def _build_production_runtime(settings: Settings) -> Runtime:
    from worker_chart_export.adapters.firestore import (
        FirestoreFlowRunStore,
        FirestoreTemplateSource,
        FirestoreUsageStore,
        make_firestore_client,
    )

    client = make_firestore_client(
        settings.google_cloud_project, emulator_host=settings.firestore_emulator_host
    )
    artifacts, storage_client = _gcs_artifacts_and_client(settings)
    usage = FirestoreUsageStore(client) if calls_chart_img(settings) else None
    ports = Ports(
        flow_runs=FirestoreFlowRunStore(client),
        templates=FirestoreTemplateSource(client),
        artifacts=artifacts,
        chart_api=build_chart_api(settings, usage),
    )

    def connect() -> None:
        # One query opens the Firestore channel (and, in production, fetches the access
        # token); a bucket lookup does the same for Cloud Storage's HTTP pool.
        from google.api_core.exceptions import Forbidden

        if usage is not None:
            usage.prime()  # and saves each account's first read: its version is known
        else:
            # a document id nobody writes: one billed read per instance start
            client.collection(CHART_TEMPLATES_COLLECTION).document(WARM_UP_DOCUMENT_ID).get(timeout=10.0)
        # a writer may not read bucket metadata: the connection is open all the same
        with contextlib.suppress(Forbidden):
            storage_client.bucket(settings.charts_bucket).exists(timeout=10.0)

    return Runtime(step_limits(settings), ports, connect)


WARM_UP_DOCUMENT_ID = "warm-up-probe"
_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def production_runtime() -> Runtime:
    """Built at most once per process, by warm_up() or else by the first event that has
    work, then reused by the warm instance."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _build_production_runtime(load_settings())
        return _runtime


def warm_up() -> float:
    """What the first step would pay for, paid right after the instance starts: the heavy
    imports, the clients (production_runtime), their connections. Meant for a background
    thread of the serving process; an event with work meanwhile waits for the runtime lock
    rather than building a second one, and a no-op event does not wait at all. Returns the
    seconds it took; failures are logged and left for the first step to meet again."""
    import time

    from worker_chart_export.logs import get_logger

    began = time.monotonic()
    try:
        import worker_chart_export.service.execute  # noqa: F401  (the handler's lazy import, paid now)

        production_runtime().connect()
    except Exception as exc:
        get_logger().warning("instance warm-up failed", errorKind=type(exc).__name__, reason=str(exc)[:200])
        return time.monotonic() - began
    took = time.monotonic() - began
    get_logger().info("instance warmed up", durationMs=round(took * 1000))
    return took


@dataclass(frozen=True)
class LocalLayout:
    """Where run-local keeps things under its output folder."""

    output_dir: Path
    flow_run_state: Path
    bucket_root: Path
    usage_file: Path

    @classmethod
    def under(cls, output_dir: Path, run_id: str) -> LocalLayout:
        # One state per run, as Firestore keeps one document per run; an id unfit for a file
        # name is hashed rather than trusted.
        name = (
            run_id if is_safe_segment(run_id) else "run-" + hashlib.sha256(run_id.encode()).hexdigest()[:16]
        )
        return cls(
            output_dir=output_dir,
            flow_run_state=output_dir / "flow_runs" / f"{name}.json",
            bucket_root=output_dir / "gcs",
            usage_file=output_dir / "chart_img_accounts_usage.json",
        )


def _require_dir(path: Path, setting: str) -> None:
    if not path.is_dir():
        raise ConfigError(setting, f"{path} is not a folder")


@dataclass(frozen=True)
class LocalPorts:
    """run-local's ports, with its flow_run store typed as the local one (it reads the state)."""

    flow_runs: LocalFlowRunStore
    ports: Ports


def build_local_ports(settings: Settings, flow_run_path: Path, layout: LocalLayout) -> LocalPorts:
    """Local files for everything, except GCS when a bucket was configured explicitly."""
    # a wrong folder would fail the step as "template not found": say what is wrong instead
    _require_dir(settings.chart_templates_dir, CHART_TEMPLATES_DIR)
    artifacts: ArtifactStore
    if settings.charts_bucket_configured:
        artifacts = gcs_artifacts(settings)
    else:
        artifacts = LocalArtifactStore(layout.bucket_root, settings.charts_bucket)

    usage: UsageStore | None = None
    if calls_chart_img(settings):
        from worker_chart_export.adapters.usage_local import FileUsageStore

        usage = FileUsageStore(layout.usage_file)
    flow_runs = LocalFlowRunStore(flow_run_path, layout.flow_run_state)
    ports = Ports(
        flow_runs=flow_runs,
        templates=LocalTemplateSource(settings.chart_templates_dir),
        artifacts=artifacts,
        chart_api=build_chart_api(settings, usage, steps_at_once=1),  # run-local runs one step
    )
    return LocalPorts(flow_runs, ports)


# --- advance_flow and the reaper ---------------------------------------------------------

_firestore_clients: dict[str, Any] = {}
_firestore_lock = threading.Lock()


def _firestore_client(settings: Settings) -> Any:
    """One Firestore client per process for the flow functions, reused while warm."""
    from worker_chart_export.adapters.firestore import make_firestore_client

    with _firestore_lock:
        key = settings.google_cloud_project or ""
        if key not in _firestore_clients:
            _firestore_clients[key] = make_firestore_client(
                settings.google_cloud_project, emulator_host=settings.firestore_emulator_host
            )
        return _firestore_clients[key]


def advance_store(settings: Settings | None = None) -> FirestoreFlowRunStore:
    from worker_chart_export.adapters.firestore import FirestoreFlowRunStore

    return FirestoreFlowRunStore(_firestore_client(settings or load_settings()))


def lease_reaper(settings: Settings) -> LeaseReaper:
    from worker_chart_export.adapters.firestore.leases import FirestoreLeaseReaper

    return FirestoreLeaseReaper(_firestore_client(settings))
