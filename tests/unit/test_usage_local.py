"""InMemoryUsageStore and FileUsageStore: the §14.4 window rules, atomic under threads."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from worker_chart_export.adapters.usage_local import FileUsageStore, InMemoryUsageStore
from worker_chart_export.core.types import AccountUsage

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
TODAY = "2025-03-10T00:00:00Z"

Store = InMemoryUsageStore | FileUsageStore


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Store]:
    def make(docs: dict | None = None) -> Store:
        if request.param == "memory":
            return InMemoryUsageStore(docs)
        path = tmp_path / "usage.json"
        if docs is not None:
            path.write_text(json.dumps(docs))
        return FileUsageStore(path)

    return make


def test_reserve_counts_up_to_the_limit(make_store: Callable[..., Store]) -> None:
    store = make_store()
    taken = [store.reserve("acc1", default_limit=3, now=NOON) for _ in range(4)]
    assert [r.reserved for r in taken] == [True, True, True, False]
    assert [r.usage_today for r in taken] == [1, 2, 3, 3]
    assert store.snapshot() == {"acc1": {"usageToday": 3, "windowStart": TODAY}}


def test_previous_day_window_resets_at_utc_midnight(make_store: Callable[..., Store]) -> None:
    store = make_store({"acc1": {"usageToday": 44, "windowStart": "2025-03-09T00:00:00Z"}})
    before_midnight = datetime(2025, 3, 9, 23, 59, 59, tzinfo=UTC)
    assert not store.reserve("acc1", default_limit=44, now=before_midnight).reserved
    after = store.reserve("acc1", default_limit=44, now=before_midnight + timedelta(seconds=2))
    assert after.reserved
    assert after.usage_today == 1
    assert store.snapshot()["acc1"]["windowStart"] == TODAY


def test_document_daily_limit_overrides_default(make_store: Callable[..., Store]) -> None:
    store = make_store({"acc1": {"usageToday": 2, "windowStart": TODAY, "dailyLimit": 2}})
    assert store.read_usage(["acc1"], default_limits={"acc1": 44}, now=NOON) == [AccountUsage("acc1", 2, 2)]
    assert not store.reserve("acc1", default_limit=44, now=NOON).reserved
    assert store.snapshot()["acc1"]["dailyLimit"] == 2  # never rewritten


def test_mark_exhausted_uses_up_the_day(make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.reserve("acc1", default_limit=10, now=NOON)
    store.mark_exhausted("acc1", default_limit=10, now=NOON)
    assert store.read_usage(["acc1", "acc2"], default_limits={"acc1": 10, "acc2": 5}, now=NOON) == [
        AccountUsage("acc1", 10, 10),
        AccountUsage("acc2", 0, 5),
    ]
    assert store.reserve("acc1", default_limit=10, now=NOON + timedelta(days=1)).reserved


def test_no_lost_increments_under_threads(make_store: Callable[..., Store]) -> None:
    store = make_store()
    limit, threads_n, per_thread = 150, 8, 25  # 200 tries for 150 units
    granted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(per_thread):
            reservation = store.reserve("acc1", default_limit=limit, now=NOON)
            if reservation.reserved:
                with lock:
                    granted.append(reservation.usage_today)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted) == list(range(1, limit + 1))  # every unit handed out exactly once
    assert store.snapshot()["acc1"]["usageToday"] == limit


def test_file_store_is_shared_by_instances_and_stays_valid_json(tmp_path: Path) -> None:
    path = tmp_path / "state" / "usage.json"
    first, second = FileUsageStore(path), FileUsageStore(path)

    def hammer(store: FileUsageStore) -> None:
        for _ in range(30):
            store.reserve("acc1", default_limit=1000, now=NOON)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in (first, second, first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert json.loads(path.read_text()) == {"acc1": {"usageToday": 120, "windowStart": TODAY}}
    assert not list(path.parent.glob("*.tmp"))


def test_file_store_missing_file_means_unused(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path / "absent.json")
    assert store.read_usage(["a"], default_limits={"a": 3}, now=NOON) == [AccountUsage("a", 0, 3)]
    assert not (tmp_path / "absent.json").exists()  # reading writes nothing
