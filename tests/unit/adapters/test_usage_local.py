"""InMemoryUsageStore and FileUsageStore: the §14.4 window rules, atomic under threads."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.core.chart_img.usage import Pacing
from worker_chart_export.core.types import ReservationRefusal
from worker_chart_export.testing import InMemoryUsageStore

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
    refused = store.reserve("acc1", default_limit=44, now=NOON)
    assert (refused.reserved, refused.usage_today, refused.daily_limit) == (False, 2, 2)
    assert refused.refusal is ReservationRefusal.EXHAUSTED
    assert store.snapshot()["acc1"]["dailyLimit"] == 2  # never rewritten


def test_mark_exhausted_uses_up_the_day_and_says_why(make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.reserve("acc1", default_limit=10, now=NOON)
    store.mark_exhausted("acc1", now=NOON, reason='CHART-IMG answered 429 "Limit Exceeded"')
    assert store.snapshot()["acc1"] == {
        "usageToday": 1,  # the unit spent, not raised to the limit: exhaustion is its own field
        "windowStart": TODAY,
        "exhaustedUntil": "2025-03-11T00:00:00.000Z",
        "exhaustedReason": 'CHART-IMG answered 429 "Limit Exceeded"',
    }
    assert not store.reserve("acc1", default_limit=10, now=NOON).reserved
    assert store.reserve("acc1", default_limit=10, now=NOON + timedelta(days=1)).reserved


def test_mark_disabled_refuses_the_key_for_15_minutes_then_one_probe(
    make_store: Callable[..., Store],
) -> None:
    store = make_store({"acc1": {"usageToday": 4, "windowStart": "2025-03-09T00:00:00Z"}})
    store.mark_disabled("acc1", reason="refused twice", now=NOON)
    assert store.snapshot()["acc1"] == {
        "usageToday": 0,  # yesterday's count is over: the disabling is today's
        "windowStart": TODAY,
        "disabled": True,
        "disabledUntil": "2025-03-10T12:15:00.000Z",
        "disabledReason": "refused twice",
    }
    refused = store.reserve("acc1", default_limit=10, now=NOON + timedelta(minutes=14))
    assert (refused.reserved, refused.refusal) == (False, ReservationRefusal.DISABLED)
    assert store.snapshot()["acc1"]["usageToday"] == 0  # nothing taken, nothing written
    later = NOON + timedelta(minutes=15)
    probe = store.reserve("acc1", default_limit=10, now=later)
    assert probe.reserved and probe.probe  # the first call after it decides
    assert store.snapshot()["acc1"]["disabledUntil"] == "2025-03-10T12:16:00.000Z"  # others wait for it
    assert store.reserve("acc1", default_limit=10, now=later).refusal is ReservationRefusal.DISABLED
    store.mark_serving("acc1", now=later)
    assert (store.snapshot()["acc1"]["disabled"], store.snapshot()["acc1"]["disabledUntil"]) == (False, None)
    assert store.reserve("acc1", default_limit=10, now=later).reserved


def test_mark_cooling_sets_the_key_aside_then_probes_it(make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.mark_cooling("acc1", reason="429 streak: x", now=NOON)
    assert store.snapshot()["acc1"] == {
        "coolUntil": "2025-03-10T12:15:00.000Z",
        "coolReason": "429 streak: x",
    }
    refused = store.reserve("acc1", default_limit=10, now=NOON + timedelta(minutes=14, seconds=59))
    assert refused.refusal is ReservationRefusal.COOLING
    probe = store.reserve("acc1", default_limit=10, now=NOON + timedelta(minutes=15))
    assert (
        probe.reserved and probe.probe and store.snapshot()["acc1"]["coolUntil"] == "2025-03-10T12:16:00.000Z"
    )
    store.mark_cooling("acc1", reason="429 streak: the probe answered 429", now=NOON + timedelta(minutes=15))
    assert store.snapshot()["acc1"]["coolUntil"] == "2025-03-10T12:30:00.000Z"  # set aside again
    store.mark_serving("acc1", now=NOON + timedelta(minutes=30))
    back = store.reserve("acc1", default_limit=10, now=NOON + timedelta(minutes=30))
    assert back.reserved and not back.probe


def test_a_legacy_disabled_flag_holds_for_its_day(make_store: Callable[..., Store]) -> None:
    store = make_store({"acc1": {"usageToday": 4, "windowStart": TODAY, "disabled": True}})
    assert (
        store.reserve("acc1", default_limit=10, now=NOON + timedelta(hours=11)).refusal
        is ReservationRefusal.DISABLED
    )
    tomorrow = store.reserve("acc1", default_limit=10, now=NOON + timedelta(days=1))
    assert tomorrow.reserved and not tomorrow.probe  # a new day tries the key again
    assert store.snapshot()["acc1"]["disabled"] is False


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
    assert store.reserve("a", default_limit=3, now=NOON).usage_today == 1
    assert json.loads((tmp_path / "absent.json").read_text()) == {
        "a": {"usageToday": 1, "windowStart": TODAY}
    }


def test_pacing_gives_the_burst_then_one_slot_per_interval(make_store: Callable[..., Store]) -> None:
    store = make_store()
    pacing = Pacing(rate_per_second=2.0, burst=3)
    waits = [
        (r.send_at - NOON).total_seconds() if r.send_at else None
        for r in (store.reserve("acc1", default_limit=44, now=NOON, pacing=pacing) for _ in range(5))
    ]
    assert waits == [0.0, 0.0, 0.0, 0.5, 1.0]
    later = NOON + timedelta(seconds=10)  # idle long enough: the whole burst is back
    assert store.reserve("acc1", default_limit=44, now=later, pacing=pacing).send_at == later


def test_a_slot_beyond_max_wait_is_refused_and_takes_nothing(make_store: Callable[..., Store]) -> None:
    store = make_store()
    pacing = Pacing(rate_per_second=1.0, burst=1)
    assert store.reserve("acc1", default_limit=44, now=NOON, pacing=pacing).reserved
    before = store.snapshot()
    busy = store.reserve("acc1", default_limit=44, now=NOON, pacing=pacing, max_wait=0.5)
    assert not busy.reserved and busy.refusal is ReservationRefusal.BUSY
    assert store.snapshot() == before


def test_read_answers_the_documents_as_they_are(make_store: Callable[..., Store]) -> None:
    store = make_store({"a": {"usageToday": 3, "windowStart": TODAY, "tat": 5.0}})
    assert store.read(["a", "b"]) == {"a": {"usageToday": 3, "windowStart": TODAY, "tat": 5.0}, "b": None}
    answer = store.read(["a"])
    answer["a"]["usageToday"] = 99  # a copy: the store is untouched
    assert store.read(["a"])["a"] == {"usageToday": 3, "windowStart": TODAY, "tat": 5.0}


def test_a_unit_given_back_lowers_the_count_and_is_counted(make_store: Callable[..., Store]) -> None:
    store = make_store()
    reservations = [store.reserve("acc1", default_limit=5, now=NOON, pacing=Pacing(1.0, 3)) for _ in range(2)]
    tat = store.snapshot()["acc1"]["tat"]
    refund = store.refund("acc1", day=reservations[1].day or "")
    assert (refund.given_back, refund.usage_today, refund.refunded_today) == (True, 1, 1)
    assert store.snapshot()["acc1"] == {"usageToday": 1, "windowStart": TODAY, "tat": tat, "refundedToday": 1}
    stale = store.refund("acc1", day="2025-03-09T00:00:00Z")  # a unit of an older day: not ours now
    assert not stale.given_back and store.snapshot()["acc1"]["usageToday"] == 1
