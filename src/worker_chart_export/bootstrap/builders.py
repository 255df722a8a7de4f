"""How each part is built from `Settings`: the served step's adapters and limits
(`served_step`), run-local's step on local files (`local_step`), the bucket checked at start
(`check_configuration`); the chart API and its accounts: chart_api.py. Heavy client libraries
are imported here, lazily, and only for the adapters actually used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from worker_chart_export.adapters.local import (
    LocalArtifactStore,
    LocalFlowRunStore,
    LocalTemplateSource,
)
from worker_chart_export.bootstrap.chart_api import (
    build_chart_api,
    calls_chart_img,
    chart_img_accounts,
    require_dir,
    tradingview_sessions,
)
from worker_chart_export.core.chart_img.plans import AccountPlans, plan_named
from worker_chart_export.core.clock import SYSTEM_CLOCK, Clock
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.naming import CHART_TEMPLATES_COLLECTION, is_safe_segment
from worker_chart_export.core.retry import (
    ARTIFACT_WRITE_REQUEST,
    BUCKET_REQUESTS,
    CLAIM_COMMITS,
    USAGE_COMMITS,
)
from worker_chart_export.environment import (
    CHART_TEMPLATES_DIR,
    CHARTS_BUCKET,
)
from worker_chart_export.service.ports import ArtifactStore, Ports
from worker_chart_export.settings import Settings

# One request to the bucket may take this long (the library's own default is 60 s).
GCS_REQUEST_TIMEOUT_SECONDS = 15.0

if TYPE_CHECKING:
    from google.cloud import firestore

    from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
    from worker_chart_export.adapters.chart_img.usage_store import UsageStore
    from worker_chart_export.adapters.gcs import GcsArtifactStore


@dataclass(frozen=True)
class StepParts:
    """What execute_step is handed: the ports, the step's limits and the clock."""

    ports: Ports
    limits: StepLimits
    clock: Clock
    # Opens what the first step would otherwise open on its own time (gRPC channel, HTTP
    # connections, credentials); run once by warm_up(), never on the request path.
    connect: Callable[[], None] = field(default=lambda: None, compare=False)


def step_limits(settings: Settings, accounts: Sequence[AccountConfig] = ()) -> StepLimits:
    """The step's limits; `accounts`: those the chart API calls (none in mock mode), whose
    plans (else CHART_IMG_PLAN) decide which templates are valid and who may serve them."""
    return replace(
        StepLimits.within_request(settings.request_timeout_seconds, settings.finalize_budget_seconds),
        chart_concurrency=settings.chart_concurrency,
        default_timezone=settings.charts_default_timezone,
        plans=account_plans(settings, accounts),
        chart_reuse_max_age_seconds=settings.chart_reuse_max_age_seconds,
        step_retries=settings.step_retries,
        # mock mode makes no call: a layout template needs no time for one
        layout_call_seconds=settings.chart_img_layout_timeout_seconds if calls_chart_img(settings) else None,
    )


def account_plans(settings: Settings, accounts: Sequence[AccountConfig]) -> AccountPlans:
    """Each account's plan: its declared `plan`, else CHART_IMG_PLAN."""
    return AccountPlans.of(plan_named(settings.chart_img_plan), [(a.id, a.plan) for a in accounts])


def template_plans(settings: Settings, *, offline: bool = False) -> AccountPlans:
    """The configured accounts' plans, for `templates sync` (no account: CHART_IMG_PLAN).
    `offline` (a dry run needs no credentials): the accounts of CHART_IMG_ACCOUNTS_JSON
    only, the secret is not read."""
    from worker_chart_export.adapters.chart_img.accounts_config import load_accounts

    secret = None if offline else settings.chart_img_accounts_secret
    accounts = load_accounts(settings.chart_img_accounts_json, secret, settings.google_cloud_project)
    return account_plans(settings, accounts)


def check_configuration(settings: Settings) -> dict[str, object]:
    """What the first event with work would trip on, checked at start-up instead: a bad
    deployment then fails to start with a message naming the problem, rather than failing
    every event. The bucket last: it is written to and deleted from once (`probe_write`), so a
    missing or read-only bucket refuses to start rather than let each step pay for charts it
    cannot store. Returns a key-free summary for the start-up log line."""
    summary: dict[str, object] = {
        "chartsApiMode": settings.charts_api_mode.value,
        "chartsBucket": settings.charts_bucket,
    }
    if calls_chart_img(settings):
        accounts = chart_img_accounts(settings)
        summary["chartImgAccounts"] = [account.id for account in accounts]
        # their names: a bad sessions list stops the start here, not every layout chart
        summary["tradingViewSessions"] = [s.id for s in tradingview_sessions(settings, accounts)]
    check_bucket_writable(gcs_artifacts(settings, SYSTEM_CLOCK), settings.charts_bucket)
    return summary


def check_bucket_writable(artifacts: GcsArtifactStore, bucket: str) -> None:
    """The bucket takes a create-only write and a delete (what PNGs and the manifest need);
    else a ConfigError naming it, one line."""
    from worker_chart_export.core.exceptions import BucketUnusable

    try:
        artifacts.probe_write()
    except BucketUnusable as exc:
        raise ConfigError(CHARTS_BUCKET, f"bucket {bucket!r} cannot store the charts: {exc}") from None


def gcs_artifacts(settings: Settings, clock: Clock) -> GcsArtifactStore:
    from google.auth.exceptions import DefaultCredentialsError

    from worker_chart_export.adapters.gcs import GcsArtifactStore, make_storage_client

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
    store = GcsArtifactStore(
        client,
        settings.charts_bucket,
        requests=BUCKET_REQUESTS,
        writes=ARTIFACT_WRITE_REQUEST,  # retried by the service, within the step's budget
        timeout=GCS_REQUEST_TIMEOUT_SECONDS,
        clock=clock,
    )
    return store


WARM_UP_DOCUMENT_ID = "warm-up-probe"


def served_step(settings: Settings, client: firestore.Client, clock: Clock) -> StepParts:
    """The served worker's step: Firestore (`client`) for runs, templates and usage, GCS for
    artifacts, the chart API of settings.charts_api_mode; `clock` handed to each."""
    from worker_chart_export.adapters.chart_img.assembly import Seams
    from worker_chart_export.adapters.firestore import (
        FirestoreFlowRunStore,
        FirestoreTemplateSource,
        FirestoreUsageStore,
    )

    artifacts = gcs_artifacts(settings, clock)
    usage = (
        FirestoreUsageStore(client, contention=USAGE_COMMITS, clock=clock)
        if calls_chart_img(settings)
        else None
    )
    accounts = chart_img_accounts(settings)
    ports = Ports(
        flow_runs=FirestoreFlowRunStore(client, claim_tries=CLAIM_COMMITS.attempts or 1, clock=clock),
        templates=FirestoreTemplateSource(client, clock=clock),
        artifacts=artifacts,
        chart_api=build_chart_api(settings, usage, seams=Seams(clock), accounts=accounts),
    )

    def connect() -> None:
        # One query opens the Firestore channel (and, in production, fetches the access
        # token); the bucket's write check does the same for Cloud Storage's HTTP pool, and
        # says at once (ConfigError) when the bucket cannot store what steps would pay for.
        if usage is not None:
            usage.prime()  # and saves each account's first read: its version is known
        else:
            # a document id nobody writes: one billed read per instance start
            client.collection(CHART_TEMPLATES_COLLECTION).document(WARM_UP_DOCUMENT_ID).get(timeout=10.0)
        check_bucket_writable(artifacts, settings.charts_bucket)

    return StepParts(ports, step_limits(settings, accounts), clock, connect)


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
            usage_file=cls.usage_file_in(output_dir),
        )

    @staticmethod
    def usage_file_in(output_dir: Path) -> Path:
        """The accounts' usage, one file for every run under `output_dir` (the accounts are
        shared as Firestore shares them)."""
        return output_dir / "chart_img_accounts_usage.json"


class LocalStep(NamedTuple):
    """run-local's step, with its flow_run store typed as the local one (it reads the state)."""

    flow_runs: LocalFlowRunStore
    parts: StepParts


def local_step(settings: Settings, flow_run_path: Path, layout: LocalLayout) -> LocalStep:
    """Local files for everything, except GCS when a bucket was configured explicitly; the
    system clock (a person waits for it)."""
    # a wrong folder would fail the step as "template not found": say what is wrong instead
    require_dir(settings.chart_templates_dir, CHART_TEMPLATES_DIR)
    from worker_chart_export.adapters.chart_img.assembly import Seams

    clock = SYSTEM_CLOCK
    artifacts: ArtifactStore
    if settings.charts_bucket_configured:
        artifacts = gcs_artifacts(settings, clock)
    else:
        artifacts = LocalArtifactStore(layout.bucket_root, settings.charts_bucket)
    usage: UsageStore | None = None
    if calls_chart_img(settings):
        from worker_chart_export.adapters.usage_local import FileUsageStore

        usage = FileUsageStore(layout.usage_file)
    flow_runs = LocalFlowRunStore(flow_run_path, layout.flow_run_state)
    accounts = chart_img_accounts(settings)
    ports = Ports(
        flow_runs=flow_runs,
        templates=LocalTemplateSource(settings.chart_templates_dir),
        artifacts=artifacts,
        # run-local runs one step
        chart_api=build_chart_api(settings, usage, seams=Seams(clock), steps_at_once=1, accounts=accounts),
    )
    return LocalStep(flow_runs, StepParts(ports, step_limits(settings, accounts), clock))
