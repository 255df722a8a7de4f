"""FirestoreUsageStore against the real Firestore emulator: the daily window of contract §14.4."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.bulk_batch import BulkWriteBatch

from harness.firestore_emulator import FirestoreEmulator
from harness.firestore_fault_proxy import FirestoreFaultProxy
from worker_chart_export.adapters.firestore import FirestoreUsageStore
from worker_chart_export.adapters.firestore.usage_waves import WRITE_ID
from worker_chart_export.core.chart_img.usage import Pacing, ReservationRequest
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import Reservation, ReservationRefusal
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

NOW = datetime(2026, 11, 22, 4, 12, 3, tzinfo=UTC)
TODAY = "2026-11-22T00:00:00Z"
YESTERDAY = "2026-11-21T00:00:00Z"
COLLECTION = "chart_img_accounts_usage"


def usage_doc(client: firestore.Client, account_id: str) -> dict[str, Any] | None:
    """The document's fields about the account (its write's id is the store's own)."""
    doc = client.collection(COLLECTION).document(account_id).get().to_dict()
    return None if doc is None else {k: v for k, v in doc.items() if k != WRITE_ID}


def put_usage(client: firestore.Client, account_id: str, **fields: Any) -> None:
    client.collection(COLLECTION).document(account_id).set(fields)


def test_reserve_takes_units_until_the_limit(firestore_client: firestore.Client) -> None:
    store = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)

    results = [store.reserve("acc-1", default_limit=2, now=NOW) for _ in range(3)]

    assert results == [
        Reservation("acc-1", True, 1, 2),
        Reservation("acc-1", True, 2, 2),
        Reservation("acc-1", False, 2, 2),
    ]
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 2, "windowStart": TODAY}


def test_daily_limit_in_the_document_overrides_the_default(firestore_client: firestore.Client) -> None:
    put_usage(firestore_client, "acc-1", dailyLimit=1, usageToday=0, windowStart=TODAY, note="kept")
    store = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)

    first = store.reserve("acc-1", default_limit=44, now=NOW)
    second = store.reserve("acc-1", default_limit=44, now=NOW)

    assert first == Reservation("acc-1", True, 1, 1)
    assert second == Reservation("acc-1", False, 1, 1)
    # merge: fields the worker does not own survive
    assert usage_doc(firestore_client, "acc-1") == {
        "dailyLimit": 1,
        "usageToday": 1,
        "windowStart": TODAY,
        "note": "kept",
    }


def test_a_new_utc_day_resets_the_window(firestore_client: firestore.Client) -> None:
    put_usage(firestore_client, "acc-1", usageToday=44, windowStart=YESTERDAY)
    store = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)
    assert store.reserve("acc-1", default_limit=44, now=NOW - timedelta(days=1)).reserved is False

    reservation = store.reserve("acc-1", default_limit=44, now=NOW)

    assert reservation == Reservation("acc-1", True, 1, 44)
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 1, "windowStart": TODAY}


def test_one_transaction_reserves_quota_and_the_send_slot(firestore_client: firestore.Client) -> None:
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    pacing = Pacing(rate_per_second=1.0, burst=2)
    slots = [store.reserve("acc-1", default_limit=44, now=NOW, pacing=pacing) for _ in range(3)]
    assert [(r.send_at - NOW).total_seconds() for r in slots if r.send_at] == [0.0, 0.0, 1.0]
    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and doc["usageToday"] == 3
    assert doc["tat"] == pytest.approx(NOW.timestamp() + 3.0)
    busy = store.reserve("acc-1", default_limit=44, now=NOW, pacing=pacing, max_wait=1.5)
    assert not busy.reserved and busy.refusal is ReservationRefusal.BUSY
    assert usage_doc(firestore_client, "acc-1") == doc  # a refusal writes nothing


def test_two_instances_interleaving_on_one_account_see_each_others_slots(
    firestore_client: firestore.Client,
) -> None:
    """Each store remembers the version it wrote; when another instance wrote since, its
    compare-and-set fails, it reads again and takes the slot after the other's."""
    clock = FakeClock(NOW)
    first, second = (FirestoreUsageStore(firestore_client, clock=clock) for _ in range(2))
    pacing = Pacing(rate_per_second=1.0, burst=1)
    slots = [
        store.reserve("acc-1", default_limit=44, now=NOW, pacing=pacing).send_at
        for store in (first, second, first, first, second)
    ]
    assert [(slot - NOW).total_seconds() for slot in slots if slot] == [0.0, 1.0, 2.0, 3.0, 4.0]
    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and doc["usageToday"] == 5
    assert doc["tat"] == pytest.approx(NOW.timestamp() + 5.0)


def test_primed_versions_save_the_read_and_a_stale_one_is_read_again(
    firestore_client: firestore.Client,
) -> None:
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    put_usage(firestore_client, "acc-2", usageToday=1, windowStart=TODAY)
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    assert store.prime() == 2
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 4
    # another instance writes after the prime: the remembered version is stale, the
    # compare-and-set fails, the store reads again and counts from the real value
    put_usage(firestore_client, "acc-2", usageToday=10, windowStart=TODAY)
    assert store.reserve("acc-2", default_limit=44, now=NOW).usage_today == 11
    assert usage_doc(firestore_client, "acc-2") == {"usageToday": 11, "windowStart": TODAY}
    # no document at prime time: created by the first reservation, even if someone else
    # created it meanwhile (the create fails, the store reads it)
    assert store.reserve("acc-3", default_limit=44, now=NOW).usage_today == 1
    put_usage(firestore_client, "acc-4", usageToday=7, windowStart=TODAY)
    assert store.reserve("acc-4", default_limit=44, now=NOW).usage_today == 8


def test_a_wave_reserves_several_accounts_in_one_write_each(firestore_client: firestore.Client) -> None:
    """One BatchWrite: each account's units and slots as one-at-a-time reservations would
    give them, each write on the version the store knew; an account whose version is not
    known, or changed meanwhile, is left out (nothing reserved, nothing written)."""
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    put_usage(firestore_client, "acc-2", usageToday=1, windowStart=TODAY)
    put_usage(firestore_client, "acc-3", usageToday=5, windowStart=TODAY)
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    assert store.prime() == 3
    put_usage(firestore_client, "acc-2", usageToday=9, windowStart=TODAY)  # another instance
    pacing = Pacing(rate_per_second=1.0, burst=2)
    requests = [
        ReservationRequest("acc-1", 3, 44, pacing),
        ReservationRequest("acc-2", 2, 44, pacing),
        ReservationRequest("acc-3", 2, 6, None),  # room for one only
        ReservationRequest("acc-4", 1, 44, None),  # no document: created
    ]

    answer = store.reserve_many(requests, now=NOW, max_wait=5.0)

    assert set(answer) == {"acc-1", "acc-3", "acc-4"}
    assert [(r.usage_today, (r.send_at - NOW).total_seconds()) for r in answer["acc-1"] if r.send_at] == [
        (4, 0.0),
        (5, 0.0),
        (6, 1.0),
    ]
    assert answer["acc-3"] == [Reservation("acc-3", True, 6, 6), Reservation("acc-3", False, 6, 6)]
    assert answer["acc-3"][-1].refusal is ReservationRefusal.EXHAUSTED
    assert answer["acc-4"] == [Reservation("acc-4", True, 1, 44)]
    acc1 = usage_doc(firestore_client, "acc-1")
    assert acc1 is not None and acc1["usageToday"] == 6
    assert acc1["tat"] == pytest.approx(NOW.timestamp() + 3.0)
    assert usage_doc(firestore_client, "acc-2") == {"usageToday": 9, "windowStart": TODAY}
    assert usage_doc(firestore_client, "acc-3") == {"usageToday": 6, "windowStart": TODAY}
    # what the wave wrote is remembered, and a stale account is read again next time
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 7
    assert store.reserve("acc-2", default_limit=44, now=NOW).usage_today == 10
    # not primed: nothing is known, so nothing is batched
    assert (
        FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK).reserve_many(
            requests, now=NOW, max_wait=5.0
        )
        == {}
    )


def test_a_read_makes_the_next_wave_write_on_the_current_versions(firestore_client: firestore.Client) -> None:
    """Another instance wrote since this store's last look: the read brings its versions up
    to date, so the wave's writes find them current instead of being left out."""
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    assert store.prime() == 1
    put_usage(firestore_client, "acc-1", usageToday=9, windowStart=TODAY)  # another instance
    requests = [ReservationRequest("acc-1", 2, 44, None), ReservationRequest("acc-2", 1, 44, None)]
    assert store.read(["acc-1", "acc-2"]) == {"acc-1": {"usageToday": 9, "windowStart": TODAY}, "acc-2": None}
    answer = store.reserve_many(requests, now=NOW, max_wait=5.0)
    assert [r.usage_today for r in answer["acc-1"]] == [10, 11] and answer["acc-2"][0].usage_today == 1
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 11, "windowStart": TODAY}


def test_a_wave_whose_answer_was_lost_counts_once(
    firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The BatchWrite landed, its answer did not come: one read finds the wave's id on the
    account, so its reservation is made once (before: the caller reserved again, 2 units for
    one call)."""
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    store.prime()
    request = ReservationRequest("acc-1", 1, 44, None)
    commit = BulkWriteBatch.commit

    def commit_then_lose_the_answer(self: BulkWriteBatch, **kwargs: Any) -> Any:
        commit(self, **kwargs)
        raise api_exceptions.ServiceUnavailable("connection reset after commit")  # type: ignore[no-untyped-call]

    with monkeypatch.context() as patched:
        patched.setattr(BulkWriteBatch, "commit", commit_then_lose_the_answer)
        answer = store.reserve_many([request], now=NOW, max_wait=5.0)
    assert [r.usage_today for r in answer["acc-1"]] == [4]
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 4, "windowStart": TODAY}
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 5  # the next one: 5


def test_a_wave_neither_answered_nor_readable_reserves_nothing_it_knows_of(
    firestore_client: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wave's answer lost and the read after it failing too: the store cannot know, says
    so (TransientStoreError), and reads the account before its next write."""
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    store = FirestoreUsageStore(firestore_client, clock=FakeClock(NOW))
    store.prime()

    def lost(self: BulkWriteBatch, **kwargs: Any) -> Any:
        raise api_exceptions.ServiceUnavailable("connection reset")  # type: ignore[no-untyped-call]

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise api_exceptions.ServiceUnavailable("still down")  # type: ignore[no-untyped-call]

    with monkeypatch.context() as patched:
        patched.setattr(BulkWriteBatch, "commit", lost)
        patched.setattr(firestore_client, "get_all", unreadable)
        with pytest.raises(TransientStoreError, match="acc-1"):
            store.reserve_many([ReservationRequest("acc-1", 1, 44, None)], now=NOW, max_wait=5.0)
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 4


@pytest.fixture
def proxied(firestore_client: firestore.Client, firestore_emulator: FirestoreEmulator) -> Any:
    """A client reaching the emulator through the fault proxy, and the proxy."""
    proxy = FirestoreFaultProxy(firestore_emulator).start()
    env = pytest.MonkeyPatch()
    env.setenv("FIRESTORE_EMULATOR_HOST", proxy.host)
    client = firestore.Client(project=firestore_emulator.project)
    env.undo()
    yield client, proxy
    client.close()
    proxy.stop()


def test_a_reservation_whose_reply_was_lost_counts_once(
    firestore_client: firestore.Client, proxied: Any
) -> None:
    """The Commit lands, its answer is lost (UNAVAILABLE): api_core sends it again, which
    fails its precondition on our own new version. The store reads, finds its write's id,
    and the unit counts once (before: 4 units for 3 calls)."""
    client, proxy = proxied
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    store = FirestoreUsageStore(client, clock=FakeClock(NOW))
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 4
    lost = proxy.lose_answer("Commit", b"acc-1")
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 5
    assert lost.refused == 1  # the answer really was lost
    assert store.reserve("acc-1", default_limit=44, now=NOW).usage_today == 6
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 6, "windowStart": TODAY}


def test_a_refund_whose_reply_was_lost_counts_once(firestore_client: firestore.Client, proxied: Any) -> None:
    client, proxy = proxied
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY)
    store = FirestoreUsageStore(client, clock=FakeClock(NOW))
    lost = proxy.lose_answer("Commit", b"acc-1")
    refund = store.refund("acc-1", day=TODAY)
    assert (refund.usage_today, refund.refunded_today, lost.refused) == (2, 1, 1)
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 2, "windowStart": TODAY, "refundedToday": 1}


def test_a_wave_whose_reply_was_lost_on_the_wire_counts_once(
    firestore_client: firestore.Client, proxied: Any
) -> None:
    """The same through the real gRPC path: BatchWrite done by the emulator, answered
    UNAVAILABLE by the proxy; the read after it confirms the wave (before: 6 units for 3
    calls once the calls reserved again one by one)."""
    client, proxy = proxied
    for account in ("acc-1", "acc-2"):
        put_usage(firestore_client, account, usageToday=1, windowStart=TODAY)
    store = FirestoreUsageStore(client, clock=FakeClock(NOW))
    store.prime()
    lost = proxy.lose_answer("BatchWrite", b"chart_img_accounts_usage")
    requests = [ReservationRequest("acc-1", 2, 44, None), ReservationRequest("acc-2", 1, 44, None)]
    answer = store.reserve_many(requests, now=NOW, max_wait=5.0)
    assert lost.refused == 1
    assert [r.usage_today for r in answer["acc-1"]] == [2, 3] and [
        r.usage_today for r in answer["acc-2"]
    ] == [2]
    assert usage_doc(firestore_client, "acc-1") == {"usageToday": 3, "windowStart": TODAY}
    assert usage_doc(firestore_client, "acc-2") == {"usageToday": 2, "windowStart": TODAY}


class TickingClock(FakeClock):
    """Every look at the monotonic clock finds it a second later: a slow store."""

    def monotonic(self) -> float:
        self.advance(1.0)
        return super().monotonic()


def test_the_slot_counts_the_time_the_store_spent(firestore_client: firestore.Client) -> None:
    """A retried attempt (or a slow read) must not take a slot in the past: `now` is the
    caller's moment, advanced by the time the store spent before computing the slot."""
    store = FirestoreUsageStore(firestore_client, clock=TickingClock(NOW))
    reservation = store.reserve("acc-1", default_limit=44, now=NOW, pacing=Pacing(1.0, 1))
    assert reservation.send_at == NOW + timedelta(seconds=1)
    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and doc["tat"] == pytest.approx(NOW.timestamp() + 2.0)


def test_mark_exhausted_takes_the_key_out_for_the_day_keeping_its_count(
    firestore_client: firestore.Client,
) -> None:
    put_usage(firestore_client, "acc-1", usageToday=3, windowStart=TODAY, dailyLimit=20)
    store = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)

    store.mark_exhausted("acc-1", now=NOW, reason='CHART-IMG answered 429 "Limit Exceeded"')

    assert usage_doc(firestore_client, "acc-1") == {
        "usageToday": 3,  # the units really spent: the exhaustion is a field of its own
        "windowStart": TODAY,
        "dailyLimit": 20,
        "exhaustedUntil": "2026-11-23T00:00:00.000Z",
        "exhaustedReason": 'CHART-IMG answered 429 "Limit Exceeded"',
    }
    assert store.reserve("acc-1", default_limit=44, now=NOW).reserved is False
    # the next UTC day starts afresh
    assert store.reserve("acc-1", default_limit=44, now=NOW + timedelta(days=1)).reserved is True


def test_mark_disabled_refuses_the_key_to_every_instance_for_the_day(
    firestore_client: firestore.Client,
) -> None:
    this, other = (FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK) for _ in range(2))
    assert other.reserve("acc-1", default_limit=44, now=NOW).reserved  # other knows the version

    this.mark_disabled("acc-1", reason="refused twice", now=NOW)

    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and (doc["disabled"], doc["disabledReason"], doc["usageToday"]) == (
        True,
        "refused twice",
        1,
    )
    refused = other.reserve("acc-1", default_limit=44, now=NOW)  # its version is stale: read again
    assert (refused.reserved, refused.refusal) == (False, ReservationRefusal.DISABLED)
    assert this.reserve("acc-1", default_limit=44, now=NOW + timedelta(days=1)).reserved is True
    assert usage_doc(firestore_client, "acc-1")["disabled"] is False  # type: ignore[index]


def test_concurrent_reservations_never_exceed_the_limit(firestore_client: firestore.Client) -> None:
    limit, threads_count, per_thread = 4, 3, 2
    store = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)
    barrier = threading.Barrier(threads_count)
    results: list[Reservation | BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        for _ in range(per_thread):
            try:
                outcome: Reservation | BaseException = store.reserve("shared", default_limit=limit, now=NOW)
            except BaseException as exc:  # recorded, asserted below
                outcome = exc
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # until it ends: pytest-timeout (pyproject) guards a hang

    assert len(results) == threads_count * per_thread
    # giving up on contention is allowed (the caller treats it as transient), anything else is not
    assert all(isinstance(r, Reservation | TransientStoreError) for r in results), results
    granted = [r for r in results if isinstance(r, Reservation) and r.reserved]
    gave_up = [r for r in results if isinstance(r, TransientStoreError)]
    # more attempts than units: every unit is taken unless some attempt gave up on contention
    assert len(granted) == limit if not gave_up else 0 < len(granted) <= limit
    doc = usage_doc(firestore_client, "shared")
    assert doc is not None
    assert doc["usageToday"] == len(granted)  # no lost or phantom increments
    assert sorted(r.usage_today for r in granted) == list(range(1, len(granted) + 1))


def test_a_unit_given_back_is_one_compare_and_set_that_leaves_the_pacing(
    firestore_client: firestore.Client,
) -> None:
    this, other = (FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK) for _ in range(2))
    pacing = Pacing(rate_per_second=1.0, burst=3)
    mine = this.reserve("acc-1", default_limit=44, now=NOW, pacing=pacing)
    other.reserve("acc-1", default_limit=44, now=NOW, pacing=pacing)  # this store's version is stale
    tat = usage_doc(firestore_client, "acc-1")["tat"]  # type: ignore[index]

    refund = this.refund("acc-1", day=mine.day or "")  # fails its precondition, reads, writes again

    assert (refund.given_back, refund.usage_today, refund.refunded_today) == (True, 1, 1)
    assert usage_doc(firestore_client, "acc-1") == {
        "usageToday": 1,
        "windowStart": TODAY,
        "tat": tat,
        "refundedToday": 1,
    }
    assert not this.refund("acc-1", day=YESTERDAY).given_back  # an older day's unit: not ours to lower
    assert usage_doc(firestore_client, "acc-1")["usageToday"] == 1  # type: ignore[index]


def test_a_key_set_aside_is_refused_to_every_instance_then_probed_once_then_serves_again(
    firestore_client: firestore.Client,
) -> None:
    this, other = (FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK) for _ in range(2))
    assert other.reserve("acc-1", default_limit=44, now=NOW).reserved  # other knows the version

    this.mark_cooling("acc-1", reason="429 streak: test", now=NOW)

    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and (doc["coolUntil"], doc["coolReason"]) == (
        "2026-11-22T04:27:03.000Z",
        "429 streak: test",
    )
    refused = other.reserve("acc-1", default_limit=44, now=NOW + timedelta(minutes=14))
    assert (refused.reserved, refused.refusal) == (False, ReservationRefusal.COOLING)
    probe = other.reserve("acc-1", default_limit=44, now=NOW + timedelta(minutes=15))
    assert probe.reserved and probe.probe
    waiting = this.reserve("acc-1", default_limit=44, now=NOW + timedelta(minutes=15))  # waits for it
    assert waiting.refusal is ReservationRefusal.COOLING
    other.mark_serving("acc-1", now=NOW + timedelta(minutes=15))
    doc = usage_doc(firestore_client, "acc-1")
    assert doc is not None and (doc["coolUntil"], doc["coolReason"], doc["usageToday"]) == (None, None, 2)
    back = this.reserve("acc-1", default_limit=44, now=NOW + timedelta(minutes=15))
    assert back.reserved and not back.probe
