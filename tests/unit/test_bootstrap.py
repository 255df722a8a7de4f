"""bootstrap's Runtime: one per process, its parts built on first use and once, around one
Firestore client and the Clock it was built with. No emulator: the clients are made (that
opens no connection) and pointed at ports where nothing listens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from google.cloud import firestore

from harness.firestore_emulator import free_port
from worker_chart_export import bootstrap
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore, make_firestore_client
from worker_chart_export.bootstrap import Runtime, runtime
from worker_chart_export.core.exceptions import ArtifactListError, ConfigError
from worker_chart_export.core.retry import Backoff
from worker_chart_export.settings import load_settings
from worker_chart_export.testing import FakeClock

NOWHERE = f"127.0.0.1:{free_port()}"  # bound, then closed: nothing listens there
# what advance_flow must never load: the step's GCS client, chart API and accounts
STEP_ONLY_MODULES = (
    "google.cloud.storage",
    "google.cloud.secretmanager",
    "httpx",
    "worker_chart_export.adapters.gcs",
    "worker_chart_export.adapters.chart_img",
    "worker_chart_export.adapters.chart_img.accounts_config",
)


@pytest.fixture
def unreachable_clouds(settings_environment: Callable[..., None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Firestore and Cloud Storage emulators that are not there, CHART-IMG in real mode with
    no accounts: whatever reads the accounts fails, whatever connects fails."""
    settings_environment(
        FIRESTORE_EMULATOR_HOST=NOWHERE, GOOGLE_CLOUD_PROJECT="demo-bootstrap", CHARTS_API_MODE="real"
    )
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{NOWHERE}")


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch, unreachable_clouds: None) -> Iterator[None]:
    """As in a process that has not made its Runtime yet (restored after the test)."""
    monkeypatch.setattr(bootstrap, "_runtime", None)
    yield


class CountingClients:
    """Opens the Firestore client a Runtime asks for, slowly, counting how often it is asked."""

    def __init__(self) -> None:
        self.opened = 0
        self.gate = threading.Event()

    def __call__(self) -> firestore.Client:
        self.opened += 1
        self.gate.wait(0.05)  # long enough for every other thread to be asking meanwhile
        return make_firestore_client("demo-bootstrap", emulator_host=NOWHERE)

    @staticmethod
    def refused() -> firestore.Client:
        raise ConnectionRefusedError("the first try fails")


def from_threads(ask: Callable[[], Any], times: int = 8) -> list[Any]:
    with ThreadPoolExecutor(max_workers=times) as pool:
        return list(pool.map(lambda _: ask(), range(times)))


def test_a_process_has_one_runtime_whoever_asks_first(fresh_process: None) -> None:
    made = from_threads(runtime)
    assert all(each is made[0] for each in made)
    assert runtime() is made[0]


def test_advance_flows_part_reads_no_accounts_and_builds_nothing_of_the_step(
    unreachable_clouds: None,
) -> None:
    # in its own process, as a served advance_flow is: what the part imports shows what it built
    code = (
        "import sys; from worker_chart_export.bootstrap import runtime; "
        "store = runtime().advance_store(); "
        f"print(type(store).__name__, store is runtime().advance_store(), "
        f"[m for m in {STEP_ONLY_MODULES!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 2) == ["FirestoreFlowRunStore", "True", "[]\n"]


def test_the_step_reads_the_accounts_the_advance_store_never_needed(fresh_process: None) -> None:
    assert isinstance(runtime().advance_store(), FirestoreFlowRunStore)
    with pytest.raises(ConfigError, match="no CHART-IMG accounts configured"):
        runtime().step()


def test_parts_are_built_on_first_use_once_around_one_firestore_client(unreachable_clouds: None) -> None:
    clients = CountingClients()
    built = Runtime(load_settings({"charts_api_mode": "mock"}), FakeClock(), open_firestore=clients)
    assert clients.opened == 0  # nothing is built before a part is asked for
    steps = from_threads(built.step)
    stores = from_threads(built.advance_store)
    reapers = from_threads(built.reaper)
    for parts in (steps, stores, reapers):
        assert all(each is parts[0] for each in parts)
    assert clients.opened == 1  # the step, the advance store and the reaper share one client


def test_a_part_that_failed_to_build_is_built_by_the_next_caller(unreachable_clouds: None) -> None:
    answers: list[Callable[[], firestore.Client]] = [
        lambda: make_firestore_client("demo-bootstrap", emulator_host=NOWHERE),
        CountingClients.refused,
    ]
    built = Runtime(load_settings(), FakeClock(), open_firestore=lambda: answers.pop()())
    with pytest.raises(ConnectionRefusedError):
        built.advance_store()
    assert isinstance(built.advance_store(), FirestoreFlowRunStore)
    assert built.reaper().leases is not None and answers == []  # the client was had once more only


def test_every_part_is_handed_the_runtimes_clock(unreachable_clouds: None) -> None:
    clock = FakeClock()
    built = Runtime(load_settings({"charts_api_mode": "mock", "step_max_attempts": 5}), clock)
    step, reaper = built.step(), built.reaper()
    assert step.clock is clock and reaper.clock is clock and reaper.max_attempts == 5
    # the adapters got it too: the GCS store's retries wait on it, not on the wall clock
    with pytest.raises(ArtifactListError):
        step.ports.artifacts.list_objects("charts/run1/step1/")
    assert len(clock.sleeps) == 2  # three attempts (core.retry.BUCKET_REQUESTS), two waits, none real


# Every setting the step and the CHART-IMG client are built from, each away from its default
# (a part that dropped one and used the default instead would still look right with it).
NOT_THE_DEFAULTS = {
    "REQUEST_TIMEOUT_SECONDS": "120",
    "FINALIZE_BUDGET_SECONDS": "7",
    "CHART_CONCURRENCY": "5",
    "CHARTS_DEFAULT_TIMEZONE": "America/New_York",
    "CHART_IMG_PLAN": "PRO",
    "CHART_REUSE_MAX_AGE_SECONDS": "60",
    "THREADS": "3",
    "CHART_IMG_BASE_URL": "https://chart-img.test/",
    "CHART_IMG_REQUEST_TIMEOUT_SECONDS": "12",
    "CHART_IMG_MAX_ATTEMPTS": "4",
    "CHART_IMG_DAILY_LIMIT": "30",
    "CHART_IMG_RATE_PER_SECOND": "2.5",
    "CHART_IMG_BURST": "6",
    "STEP_MAX_ATTEMPTS": "7",
    "STEP_RETRY_BASE_SECONDS": "2",
    "STEP_RETRY_MAX_SECONDS": "9",
}


def test_every_setting_reaches_the_step_limits_and_the_chart_img_options(
    settings_environment: Callable[..., None],
) -> None:
    from worker_chart_export.adapters.chart_img.assembly import ChartImgOptions
    from worker_chart_export.bootstrap import chart_img_options, step_limits

    settings_environment(**NOT_THE_DEFAULTS)
    settings = load_settings()
    limits = step_limits(settings)
    assert (limits.step_budget_seconds, limits.finalize_budget_seconds, limits.lease_seconds) == (
        113.0,
        7.0,
        120.0,
    )
    assert (limits.chart_concurrency, limits.default_timezone, limits.plans.default.name) == (
        5,
        "America/New_York",
        "PRO",
    )
    assert limits.plans.describe() == "CHART_IMG_PLAN PRO, no account configured"
    assert limits.chart_reuse_max_age_seconds == 60.0
    assert limits.step_retries == Backoff(attempts=7, base=2.0, cap=9.0)
    assert chart_img_options(settings) == ChartImgOptions(
        base_url="https://chart-img.test",
        request_timeout_seconds=12.0,
        max_attempts=4,
        max_connections=15,  # THREADS x CHART_CONCURRENCY
        daily_limit=30,
        rate_per_second=2.5,
        burst=6,
        default_plan="PRO",
    )


def test_the_worker_takes_its_accounts_from_chart_img_accounts_secret(
    settings_environment: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real mode without CHART_IMG_ACCOUNTS_JSON: the step's accounts are the secret's, the
    name CHART_IMG_ACCOUNTS_SECRET gives completed with GOOGLE_CLOUD_PROJECT."""
    import json
    from types import SimpleNamespace

    from google.cloud import secretmanager

    from worker_chart_export.bootstrap.chart_api import chart_img_accounts

    asked: list[str] = []
    payload = json.dumps([{"id": "from-secret", "apiKey": "test-key-" + "5" * 32}]).encode()

    class Secrets:
        def access_secret_version(self, *, name: str) -> Any:
            asked.append(name)
            return SimpleNamespace(payload=SimpleNamespace(data=payload))

    monkeypatch.setattr(secretmanager, "SecretManagerServiceClient", Secrets)
    settings_environment(
        CHARTS_API_MODE="real",
        CHART_IMG_ACCOUNTS_SECRET="worker-accounts",
        GOOGLE_CLOUD_PROJECT="acme-charts",
    )
    assert [account.id for account in chart_img_accounts(load_settings())] == ["from-secret"]
    assert asked == ["projects/acme-charts/secrets/worker-accounts/versions/latest"]
