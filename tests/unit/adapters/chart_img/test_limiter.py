"""The AccountLimiter over the in-memory usage store (contract §14.4): which account next,
exhaustion, pacing, waves, refused keys."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import FakeClock, new_key
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.chart_img.limiter import (
    SLOT_GRAIN,
    AccountLimiter,
    Lease,
    NoAccount,
    NoAccountReason,
    PacingMargins,
)
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.plans import AccountLimits
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.testing import InMemoryUsageStore

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
TODAY = "2025-03-10T00:00:00Z"


class CountingStore(InMemoryUsageStore):
    def __init__(self, docs: dict | None = None) -> None:
        super().__init__(docs)
        self.reserves: list[str] = []

    def reserve(self, account_id: str, **kwargs: Any) -> Any:
        self.reserves.append(account_id)
        return super().reserve(account_id, **kwargs)


def accounts(*ids: str, **extra: Any) -> list[AccountConfig]:
    return [AccountConfig(id=i, apiKey=SecretStr(new_key()), **extra) for i in ids]


def limiter(
    store: InMemoryUsageStore,
    configs: list[AccountConfig],
    clock: FakeClock,
    *,
    default_limit: int = 44,
    rate: float = 100.0,
    burst: int = 100,
) -> AccountLimiter:
    return AccountLimiter(
        configs,
        store,
        defaults=AccountLimits(default_limit, rate, burst),
        clock=clock,
        margins=PacingMargins(headroom=1.0, arrival_jitter=0.0),
    )


def usage(used: int, **extra: Any) -> dict[str, Any]:
    return {"usageToday": used, "windowStart": TODAY, **extra}


def lease_id(result: Lease | NoAccount) -> str:
    assert isinstance(result, Lease), result
    return result.account_id


def test_least_used_first_ties_by_id_from_what_reservations_said() -> None:
    """No read before choosing: the order comes from what this process's reservations
    returned; accounts it knows nothing of count as unused."""
    clock = FakeClock(NOON)
    store = CountingStore({"a": usage(5), "b": usage(2), "c": usage(2)})
    chosen = limiter(store, accounts("a", "b", "c"), clock)
    picks = [lease_id(chosen.acquire(max_wait=1)) for _ in range(5)]
    assert picks == ["a", "b", "c", "b", "c"]  # then a=6, b=4, c=4
    assert store.reserves == picks  # one transaction per acquire, nothing else
    assert {a: d["usageToday"] for a, d in store.snapshot().items()} == {"a": 6, "b": 4, "c": 4}


def test_tried_accounts_go_last_but_stay_usable() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("a", "b"), clock)
    assert lease_id(chosen.acquire(tried=["a"], max_wait=1)) == "b"
    assert lease_id(chosen.acquire(tried=["a", "b"], max_wait=1)) == "a"
    single = limiter(InMemoryUsageStore(), accounts("only"), clock)
    assert lease_id(single.acquire(tried=["only"], max_wait=1)) == "only"


def test_daily_limit_document_then_config_then_default() -> None:
    clock = FakeClock(NOON)
    configs = [
        AccountConfig(id="doc", apiKey=SecretStr(new_key()), dailyLimit=50),
        AccountConfig(id="cfg", apiKey=SecretStr(new_key()), dailyLimit=3),
        AccountConfig(id="dflt", apiKey=SecretStr(new_key())),
    ]
    store = InMemoryUsageStore({"doc": usage(2, dailyLimit=2), "cfg": usage(2), "dflt": usage(4)})
    chosen = limiter(store, configs, clock, default_limit=5)
    assert [lease_id(chosen.acquire(max_wait=1)) for _ in range(2)] == ["cfg", "dflt"]
    refused = chosen.acquire(max_wait=1)
    assert refused == NoAccount(NoAccountReason.EXHAUSTED, ("cfg", "dflt", "doc"))


def test_a_plan_sets_the_account_defaults_and_explicit_values_win() -> None:
    defaults = AccountLimits(44, 1.0, 3)
    pro = AccountConfig(id="p", apiKey=SecretStr(new_key()), plan="pro")
    assert pro.plan == "PRO"
    assert pro.limits(defaults) == AccountLimits(500, 10.0, 15)
    tuned = AccountConfig(id="t", apiKey=SecretStr(new_key()), plan="MEGA", dailyLimit=7, burst=2)
    assert tuned.limits(defaults) == AccountLimits(7, 15.0, 2)
    plain = AccountConfig(id="b", apiKey=SecretStr(new_key()))
    assert plain.limits(defaults) == defaults  # no plan named: the configured defaults (44/day)


def test_all_exhausted_is_cached_for_a_minute() -> None:
    clock = FakeClock(NOON)
    store = CountingStore({"a": usage(44), "b": usage(44)})
    chosen = limiter(store, accounts("a", "b"), clock)
    assert chosen.acquire(max_wait=1) == NoAccount(NoAccountReason.EXHAUSTED, ("a", "b"))
    assert store.reserves == ["a", "b"]  # each refused: no unit taken
    assert store.snapshot() == {"a": usage(44), "b": usage(44)}
    clock.advance(59)
    assert isinstance(chosen.acquire(max_wait=1), NoAccount)
    assert store.reserves == ["a", "b"]  # answered from the in-process cache
    clock.advance(1)  # a minute exactly: the cache is over
    assert isinstance(chosen.acquire(max_wait=1), NoAccount)
    assert store.reserves == ["a", "b", "a", "b"]


def test_exhaustion_cache_ends_at_utc_midnight() -> None:
    clock = FakeClock(datetime(2025, 3, 10, 23, 59, 30, tzinfo=UTC))
    store = InMemoryUsageStore({"a": usage(44)})
    chosen = limiter(store, accounts("a"), clock)
    assert isinstance(chosen.acquire(max_wait=1), NoAccount)
    clock.advance(31)  # 00:00:01 the next day, well inside the 60 s ttl
    assert lease_id(chosen.acquire(max_wait=1)) == "a"
    assert store.snapshot()["a"]["usageToday"] == 1
    assert store.snapshot()["a"]["windowStart"] == "2025-03-11T00:00:00Z"


def test_marked_exhausted_stays_out_until_midnight_even_if_store_disagrees() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("a", "b"), clock)
    chosen.mark_exhausted("a", Answer(429, "Limit Exceeded"))
    assert store.snapshot()["a"] == {
        "usageToday": 0,  # the units spent: the exhaustion is a field of its own
        "windowStart": TODAY,
        "exhaustedUntil": "2025-03-11T00:00:00.000Z",
        "exhaustedReason": 'CHART-IMG answered 429 "Limit Exceeded": the day\'s quota',
    }
    store._docs.pop("a")  # e.g. someone reset the document
    clock.advance(3600)
    assert [lease_id(chosen.acquire(max_wait=1)) for _ in range(3)] == ["b", "b", "b"]
    assert chosen.exhausted_accounts() == ("a",)
    clock.advance(timedelta(hours=11, minutes=1).total_seconds())  # past midnight
    assert chosen.exhausted_accounts() == ()
    assert lease_id(chosen.acquire(max_wait=1)) == "a"


def test_prefers_an_account_with_a_slot_now() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore({"busy": usage(0), "idle": usage(10)})
    chosen = limiter(store, accounts("busy", "idle"), clock, rate=1.0, burst=1)
    assert lease_id(chosen.acquire(max_wait=5)) == "busy"
    assert lease_id(chosen.acquire(max_wait=5)) == "idle"  # busy is less used but has no slot
    assert clock.sleeps == []
    third = chosen.acquire(max_wait=5)  # nobody has a slot: the soonest one, after a wait
    assert isinstance(third, Lease)
    assert third.paced_seconds == pytest.approx(1.0)
    assert clock.sleeps == [pytest.approx(1.0)]


def test_no_slot_within_max_wait_is_refused_without_a_transaction() -> None:
    clock = FakeClock(NOON)
    store = CountingStore()
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
    assert lease_id(chosen.acquire(max_wait=0)) == "a"
    assert chosen.acquire(max_wait=0.5) == NoAccount(NoAccountReason.NO_TIME, ())
    assert store.reserves == ["a"]  # this process already knew a's next slot is 1 s away


def test_pacing_is_shared_through_the_store_by_every_instance() -> None:
    """Two instances (two limiters) on one usage store: together they keep one key's rate."""
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    configs = accounts("a")
    first, second = (limiter(store, configs, clock, rate=1.0, burst=2) for _ in range(2))
    leases = [first.acquire(max_wait=10), second.acquire(max_wait=10), first.acquire(max_wait=10)]
    leases.append(second.acquire(max_wait=10))
    waits = [lease.paced_seconds for lease in leases if isinstance(lease, Lease)]
    assert waits == [0.0, 0.0, pytest.approx(1.0), pytest.approx(1.0)]  # burst 2, then 1/s
    assert store.snapshot()["a"]["usageToday"] == 4


def test_account_used_up_by_another_instance_moves_on() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore({"a": usage(44)})  # this process has not seen it yet
    chosen = limiter(store, accounts("a", "b"), clock)
    assert lease_id(chosen.acquire(max_wait=1)) == "b"
    assert chosen.exhausted_accounts() == ("a",)


TOO_MANY = Answer(429, "Too Many Requests")


def test_a_rate_limited_key_cools_down_without_being_exhausted() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("a", "b"), clock)
    assert chosen.rate_limited("a", TOO_MANY, None).cooling == 1.0  # the backoff's first step
    assert chosen.rate_limited("b", TOO_MANY, 3600).cooling == 600.0  # Retry-After, held to 10 min
    assert chosen.exhausted_accounts() == ()
    lease = chosen.acquire(max_wait=5)
    assert lease_id(lease) == "a" and isinstance(lease, Lease) and lease.paced_seconds == 1.0
    assert "tat" in store.snapshot()["a"] and store.snapshot()["a"]["usageToday"] == 1
    assert "coolUntil" not in store.snapshot()["a"]  # short-lived: kept in the process only


def test_the_cooldown_escalates_per_key_and_a_success_resets_it() -> None:
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore(), accounts("a", "b"), clock)
    cooldowns = []
    for _ in range(4):
        cooldowns.append(chosen.rate_limited("a", TOO_MANY, None).cooling)
        clock.advance(cooldowns[-1])  # the next 429 answers a request sent after the cooldown
    assert cooldowns == [1.0, 2.0, 4.0, 8.0]
    assert chosen.rate_limited("b", Answer(429), None).cooling == 1.0  # b's history is its own
    chosen.succeeded("a")
    assert chosen.rate_limited("a", TOO_MANY, None).cooling == 1.0


def test_a_429_during_the_cooldown_begins_no_new_one() -> None:
    """Several calls in flight on one key, all answered 429: one cooldown, not a doubling each."""
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore(), accounts("a"), clock)
    assert [chosen.rate_limited("a", TOO_MANY, None).cooling for _ in range(3)] == [1.0] * 3
    clock.advance(1.0)
    assert chosen.rate_limited("a", TOO_MANY, None).cooling == 2.0


def test_a_key_answering_429_for_over_a_minute_while_another_serves_is_set_aside(log_capture: Any) -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore({"a": usage(9)})
    chosen = limiter(store, accounts("a", "b"), clock)
    assert lease_id(chosen.acquire(max_wait=1)) == "a"  # learns a's count: 10 of 44
    answers = [TOO_MANY, Answer(429), TOO_MANY, Answer(429, "Slow down!"), TOO_MANY, TOO_MANY, TOO_MANY]
    verdicts = []
    for answer in answers:  # at 0, 1, 3, 7, 15, 31, 61 s (+ 10 ms each): after the last cooldown
        verdicts.append(chosen.rate_limited("a", answer, None))
        clock.advance(0.005)
        chosen.succeeded("b")  # the other key serves meanwhile
        clock.advance(verdicts[-1].cooling + 0.005)
    assert [v.cooling for v in verdicts] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 0.0]
    assert [v.set_aside is not None for v in verdicts] == [False] * 6 + [True]
    (event,) = log_capture.events("chart-img key keeps answering 429: set aside, then probed")
    assert (event["severity"], event["accountId"], event["cooldowns"], event["rule"]) == (
        "ERROR",
        "a",
        7,
        "429 streak",
    )
    until = "2025-03-10T12:16:01.060Z"  # 15 minutes after the 7th 429, at 61.06 s
    assert event["setAsideUntil"] == until and event["error"] == {"code": "CHART_API_LIMIT_EXCEEDED"}
    assert event["answers"] == [
        {"httpStatus": 429, "message": "Too Many Requests", "times": 5},
        {"httpStatus": 429, "message": "", "times": 1},
        {"httpStatus": 429, "message": "Slow down!", "times": 1},
    ]
    assert (event["usedToday"], event["dailyLimit"]) == (10, 44)
    doc = store.snapshot()["a"]
    assert (doc["usageToday"], doc["coolUntil"]) == (10, until) and "exhaustedUntil" not in doc
    assert doc["coolReason"].startswith("429 streak: CHART-IMG answered 429 through 7 cooldowns over 61 s")
    assert chosen.exhausted_accounts() == ()  # set aside, not exhausted: a probe decides
    assert [lease_id(chosen.acquire(max_wait=1)) for _ in range(2)] == ["b", "b"]


def test_a_set_aside_key_is_probed_once_after_15_minutes_and_serves_again(log_capture: Any) -> None:
    """Two instances on one store: the first reservation after the set-aside is the probe,
    the other instance waits for its answer; a 200 brings the key back for both."""
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    this, other = (limiter(store, accounts("a", "b"), clock) for _ in range(2))
    store.mark_cooling("a", reason="429 streak: test", now=NOON)
    assert lease_id(other.acquire(max_wait=1)) == "b"  # the store refused a: `other` knows now
    clock.advance(15 * 60 - 1)
    assert all(lease_id(this.acquire(max_wait=1)) == "b" for _ in range(3))  # still set aside
    clock.advance(61)  # the set-aside and the view's 60 s are over
    probe = this.acquire(max_wait=1, tried=["b"])
    assert isinstance(probe, Lease) and probe.account_id == "a" and probe.reservation.probe
    assert lease_id(other.acquire(max_wait=1, tried=["b"])) == "b"  # waits for the probe's answer
    this.succeeded("a", probe=True)
    assert store.snapshot()["a"]["coolUntil"] is None
    (back,) = log_capture.events("chart-img key serves again: its probe answered 200")
    assert back["accountId"] == "a"
    clock.advance(61)
    again = other.acquire(max_wait=1, tried=["b"])
    assert isinstance(again, Lease) and again.account_id == "a" and not again.reservation.probe


def test_429s_within_a_minute_only_cool_the_key(log_capture: Any) -> None:
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore(), accounts("a"), clock)
    for _ in range(20):  # many cooldowns, but Retry-After: 2 keeps them within 40 s
        verdict = chosen.rate_limited("a", TOO_MANY, 2.0)
        assert verdict.set_aside is None and verdict.cooling == 2.0
        clock.advance(2.0)
    assert chosen.exhausted_accounts() == () and log_capture.events("chart-img key keeps answering 429") == []


def wave(chosen: AccountLimiter, count: int, *, max_wait: float) -> list[Lease]:
    """A step's first wave of `count` calls any account may serve: the leases it got, soonest
    slot first."""
    leases = chosen.acquire_many([None] * count, max_wait=max_wait)
    return sorted(
        (lease for lease in leases if lease is not None), key=lambda lease: lease.reservation.send_at or NOON
    )


class WaveCountingStore(InMemoryUsageStore):
    def __init__(self, docs: dict | None = None) -> None:
        super().__init__(docs)
        self.waves: list[dict[str, int]] = []

    def reserve_many(self, requests: Any, **kwargs: Any) -> Any:
        self.waves.append({r.account_id: r.count for r in requests})
        return super().reserve_many(requests, **kwargs)


def test_a_wave_is_one_store_call_spread_as_acquires_would_spread_it() -> None:
    clock = FakeClock(NOON)
    store = WaveCountingStore({"a": usage(5), "b": usage(2), "c": usage(2)})
    chosen = limiter(store, accounts("a", "b", "c"), clock)
    leases = wave(chosen, 5, max_wait=1)
    # unknown accounts count as unused: in flight, five picks spread a, b, c, a, b
    assert store.waves == [{"a": 2, "b": 2, "c": 1}]
    assert sorted(lease.account_id for lease in leases) == ["a", "a", "b", "b", "c"]
    assert {a: d["usageToday"] for a, d in store.snapshot().items()} == {"a": 7, "b": 4, "c": 3}
    assert clock.sleeps == []  # nothing waited yet: the slots are the caller's to wait for
    # what the wave's reservations said is known now: the next pick is the least used
    assert lease_id(chosen.acquire(max_wait=1)) == "c"


def test_a_wave_on_a_paced_key_takes_its_burst_and_what_fits_in_the_wait() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=3)
    leases = wave(chosen, 5, max_wait=1.5)
    slots = [lease.reservation.send_at - NOON for lease in leases if lease.reservation.send_at]
    assert [slot.total_seconds() for slot in slots] == [0.0, 0.0, 0.0, 1.0]  # not a 5th 2 s away
    assert store.snapshot()["a"]["usageToday"] == 4
    waited = chosen.wait_for_slot(leases[-1])
    assert waited.paced_seconds == pytest.approx(1.0) and clock.sleeps == [pytest.approx(1.0)]


def test_a_wave_counts_its_own_picks_as_taken_slots() -> None:
    """A key that looks free takes the wave's first pick; the next goes where the next
    slot is sooner, not onto the same key's queue."""
    clock = FakeClock(NOON)
    store = WaveCountingStore()
    chosen = limiter(store, accounts("a", "b"), clock, rate=1.0, burst=1)
    assert lease_id(chosen.acquire(max_wait=5)) == "a"  # a's next slot: 1 s from now
    clock.advance(0.5)
    leases = wave(chosen, 3, max_wait=5)
    assert store.waves == [{"a": 1, "b": 2}]  # b now, a at 0.5 s, b at 1 s (not b at 2 s)
    slots = [(lease.reservation.send_at - clock.now()).total_seconds() for lease in leases]
    assert slots == [0.0, pytest.approx(0.5), pytest.approx(1.0)]  # soonest slot first
    assert [lease.account_id for lease in leases] == ["b", "a", "b"]


class ReadCountingStore(WaveCountingStore):
    def __init__(self, docs: dict | None = None) -> None:
        super().__init__(docs)
        self.reads: list[list[str]] = []

    def read(self, account_ids: Any) -> Any:
        self.reads.append(list(account_ids))
        return super().read(account_ids)


def test_a_wave_reads_every_account_first_once_another_instance_was_seen() -> None:
    """Instance `other` made both keys busy; `this` learns it from one reservation's
    count, then reads all accounts before its wave instead of queueing on a stale view."""
    clock = FakeClock(NOON)
    store = ReadCountingStore()
    this, other = (limiter(store, accounts("a", "b"), clock, rate=1.0, burst=1) for _ in range(2))
    assert lease_id(this.acquire(max_wait=10)) == "a"  # a: slot 0; this knows a's next is 1 s
    wave(other, 3, max_wait=10)  # a at 1 s and 2 s, b now: a's next 3 s, b's 1 s
    assert wave(this, 1, max_wait=10) and store.reads == []  # nothing seen yet: no read
    # that wave (on b, which this process thought unused) saw b's count jump: behind now
    leases = wave(this, 2, max_wait=10)
    assert store.reads == [["a", "b"]]
    slots = sorted((lease.reservation.send_at - NOON).total_seconds() for lease in leases)
    assert slots == [pytest.approx(2.0), pytest.approx(3.0)]  # b at 2 s, a at 3 s: not a, a
    assert wave(this, 1, max_wait=10) and store.reads == [["a", "b"]]  # up to date now


def test_a_wave_leaves_out_cooling_and_exhausted_accounts() -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore({"used": usage(44)})
    chosen = limiter(store, accounts("cool", "used", "ok"), clock)
    chosen.rate_limited("cool", TOO_MANY, None)
    leases = wave(chosen, 3, max_wait=5)
    assert [lease.account_id for lease in leases] == ["ok", "ok"]  # "used" refused at once
    assert chosen.exhausted_accounts() == ("used",)
    assert "cool" not in store.snapshot()


REFUSED = Answer(401, "Invalid Request")


def test_a_key_refused_once_stays_usable_and_twice_is_disabled(log_capture: Any) -> None:
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("bad", "good"), clock)
    assert chosen.key_refused("bad", REFUSED) is False
    assert chosen.usable_accounts() == ("bad", "good") and "bad" not in store.snapshot()
    assert log_capture.events("chart-img account key refused: account disabled") == []
    assert chosen.key_refused("bad", Answer(403, "Forbidden")) is True
    assert [lease_id(chosen.acquire(max_wait=1)) for _ in range(2)] == ["good", "good"]
    (event,) = log_capture.events("chart-img account key refused: account disabled")
    assert event["severity"] == "ERROR" and event["accountId"] == "bad"
    assert event["error"] == {"code": "CHART_API_KEY_REFUSED"}
    assert event["answers"] == [
        {"httpStatus": 401, "message": "Invalid Request"},
        {"httpStatus": 403, "message": "Forbidden"},
    ]
    assert store.snapshot()["bad"] == {
        "usageToday": 0,
        "windowStart": TODAY,
        "disabled": True,
        "disabledUntil": "2025-03-10T12:15:00.000Z",  # then one probe call decides
        "disabledReason": 'CHART-IMG refused the key 401 "Invalid Request", then 403 "Forbidden"',
    }
    assert (event["rule"], event["disabledUntil"]) == (
        "key refused for two requests",
        "2025-03-10T12:15:00.000Z",
    )
    chosen.key_refused("good", REFUSED)
    chosen.key_refused("good", REFUSED)
    assert chosen.acquire(max_wait=1) == NoAccount(NoAccountReason.NO_USABLE_KEY, ())


def test_a_success_between_two_refusals_keeps_the_key() -> None:
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore(), accounts("a"), clock)
    assert chosen.key_refused("a", REFUSED) is False
    chosen.succeeded("a")
    assert chosen.key_refused("a", REFUSED) is False
    assert chosen.usable_accounts() == ("a",)


def test_a_key_disabled_by_another_instance_is_skipped_until_midnight() -> None:
    clock = FakeClock(NOON)
    store = CountingStore()
    configs = accounts("a", "b")
    other, this = limiter(store, configs, clock), limiter(store, configs, clock)
    other.key_refused("a", REFUSED)
    other.key_refused("a", REFUSED)
    assert [lease_id(this.acquire(max_wait=1)) for _ in range(3)] == ["b", "b", "b"]
    assert store.reserves == ["a", "b", "b", "b"]  # refused by the store once, then not asked
    assert this.usable_accounts() == ("b",)
    clock.advance(12 * 3600)  # the next UTC day: the key is tried again
    assert lease_id(this.acquire(max_wait=1)) == "a"
    assert store.snapshot()["a"]["disabled"] is False


def test_concurrent_callers_spread_over_the_accounts() -> None:
    """Nobody has read anything; in-flight picks still count, so nobody piles on acc a.

    Each reservation waits in the store until three are in it at once, so the picks are
    made while the others are still reserving, however the threads are scheduled (a
    reservation holds its account's lock: three at once means three accounts)."""
    clock = FakeClock(NOON)
    three_at_once = threading.Barrier(3, timeout=30)  # only broken when the picks pile up

    class OverlappingStore(InMemoryUsageStore):
        def reserve(self, account_id: str, **kwargs: Any) -> Any:
            three_at_once.wait()
            return super().reserve(account_id, **kwargs)

    store = OverlappingStore()
    chosen = limiter(store, accounts("a", "b", "c"), clock)
    with ThreadPoolExecutor(max_workers=6) as pool:
        picks = list(pool.map(lambda _: lease_id(chosen.acquire(max_wait=1)), range(6)))
    assert sorted(picks) == ["a", "a", "b", "b", "c", "c"]
    assert {a: d["usageToday"] for a, d in store.snapshot().items()} == {"a": 2, "b": 2, "c": 2}


def test_by_default_a_key_is_paced_under_its_plans_rate() -> None:
    """PacingMargins' defaults (docs/design.md): 90% of the plan's rate, so one request a
    second on BASIC leaves 1 / 0.9 s apart, never at the plan's own interval."""
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = AccountLimiter(accounts("a"), store, defaults=AccountLimits(44, 1.0, 1), clock=clock)
    first, second = chosen.acquire(max_wait=5), chosen.acquire(max_wait=5)
    assert isinstance(first, Lease) and isinstance(second, Lease)
    assert first.paced_seconds == 0.0
    assert second.paced_seconds == pytest.approx(1 / 0.9)


def test_an_exhausted_account_is_asked_again_after_a_minute() -> None:
    clock = FakeClock(NOON)
    store = CountingStore({"a": usage(44)})
    chosen = AccountLimiter(accounts("a"), store, defaults=AccountLimits(44, 100.0, 100), clock=clock)
    assert isinstance(chosen.acquire(max_wait=1), NoAccount)
    clock.advance(59.9)
    chosen.acquire(max_wait=1)
    assert store.reserves == ["a"]
    clock.advance(0.1)
    chosen.acquire(max_wait=1)
    assert store.reserves == ["a", "a"]


def test_a_lease_carries_the_stores_reservation() -> None:
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore({"a": usage(6)}), accounts("a"), clock)
    lease = chosen.acquire(max_wait=1)
    assert isinstance(lease, Lease)
    assert (lease.reservation.reserved, lease.reservation.usage_today, lease.reservation.daily_limit) == (
        True,
        7,
        44,
    )


def test_a_slot_taken_meanwhile_by_another_instance_is_no_time_not_exhaustion() -> None:
    clock = FakeClock(NOON)
    store = CountingStore()
    configs = accounts("a")
    this, other = (limiter(store, configs, clock, rate=1.0, burst=1) for _ in range(2))
    assert lease_id(other.acquire(max_wait=0)) == "a"
    assert this.acquire(max_wait=0.5) == NoAccount(NoAccountReason.NO_TIME, ())  # the store said BUSY


def test_a_cooling_keys_slot_must_fit_in_the_time_the_cooldown_leaves() -> None:
    """This process knows nothing of a's pacing; the store's slot is 2.5 s away. Cooling
    2 s with 2.4 s to wait, the cooldown is waited out first (no unit held through it), then
    the store shows the slot 0.5 s away, more than the 0.4 s left: none. With 3 s to wait it
    fits: the unit is not taken then (0.5 s is more than UNIT_HOLD_SECONDS) but when the
    slot comes, 2.5 s in all (issue 27)."""
    for max_wait, fits in ((2.4, False), (3.0, True)):
        clock = FakeClock(NOON)
        store = CountingStore({"a": usage(1, tat=NOON.timestamp() + 2.5)})
        chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
        chosen.rate_limited("a", TOO_MANY, 2.0)
        lease = chosen.acquire(max_wait=max_wait)
        assert clock.sleeps[0] == 2.0  # the cooldown, before reserving
        if fits:
            assert store.reserves == ["a", "a"] and clock.sleeps == [2.0, 0.5]
            assert isinstance(lease, Lease) and lease.paced_seconds == pytest.approx(2.5)
            assert lease.reservation.send_at == NOON + timedelta(seconds=2.5)
        else:
            assert store.reserves == ["a"]
            assert lease == NoAccount(NoAccountReason.NO_TIME, ())
            assert store.snapshot()["a"]["usageToday"] == 1  # nothing taken


class ClockFromZero(FakeClock):
    """Monotonic time from 0, so a cooldown of exactly SLOT_GRAIN reads back exactly (from
    1000.0 the addition rounds)."""

    MONOTONIC_START = 0.0


def test_a_wait_of_exactly_the_grain_is_no_wait() -> None:
    """SLOT_GRAIN is the rounding between two computations of one slot: a cooldown that far
    away is not slept out before reserving; a cooldown twice as far is."""
    for cooldown, sleeps in ((SLOT_GRAIN, []), (2 * SLOT_GRAIN, [2 * SLOT_GRAIN])):
        clock = ClockFromZero()
        chosen = limiter(InMemoryUsageStore({"a": usage(0)}), accounts("a"), clock)
        chosen.rate_limited("a", TOO_MANY, cooldown)
        assert chosen.rate_limited("a", TOO_MANY, cooldown).cooling == cooldown  # exactly
        assert lease_id(chosen.acquire(max_wait=1)) == "a"
        assert clock.sleeps == sleeps, cooldown


def test_a_wave_skips_a_key_cooling_under_a_second_and_goes_on_to_the_next() -> None:
    clock = FakeClock(NOON)
    store = WaveCountingStore()
    chosen = limiter(store, accounts("a", "b"), clock, rate=1.0, burst=1)
    chosen.rate_limited("a", TOO_MANY, 0.5)
    assert lease_id(chosen.acquire(max_wait=5)) == "b"  # b's next slot: 1 s; a cools 0.5 s
    leases = wave(chosen, 1, max_wait=5)
    assert [lease.account_id for lease in leases] == ["b"]
    assert store.waves == [{"b": 1}]


def test_wait_for_slot_sleeps_only_for_a_slot_ahead() -> None:
    clock = FakeClock(NOON)
    chosen = limiter(InMemoryUsageStore(), accounts("a"), clock)
    (lease,) = wave(chosen, 1, max_wait=1)
    waited = chosen.wait_for_slot(lease)
    assert waited.paced_seconds == 0.0 and clock.sleeps == []


class FailingMarks(InMemoryUsageStore):
    def mark_exhausted(self, account_id: str, **kwargs: Any) -> None:
        raise ConnectionError("store down")

    def mark_disabled(self, account_id: str, **kwargs: Any) -> None:
        raise TimeoutError("store down")


def test_a_mark_the_store_cannot_take_is_a_warning_naming_the_account(log_capture: Any) -> None:
    clock = FakeClock(NOON)
    chosen = limiter(FailingMarks(), accounts("a", "b"), clock)
    chosen.mark_exhausted("a", Answer(429, "Limit Exceeded"))
    assert chosen.key_refused("b", REFUSED) is False
    assert chosen.key_refused("b", REFUSED) is True
    assert chosen.exhausted_accounts() == ("a",) and chosen.usable_accounts() == ("a",)
    (exhaustion,) = log_capture.events("chart-img account exhaustion not persisted")
    (disabling,) = log_capture.events("chart-img account disabling not persisted")
    assert (exhaustion["severity"], exhaustion["accountId"], exhaustion["errorKind"]) == (
        "WARNING",
        "a",
        "ConnectionError",
    )
    assert (disabling["severity"], disabling["accountId"], disabling["errorKind"]) == (
        "WARNING",
        "b",
        "TimeoutError",
    )


# --- each account's plan: a call goes only to the accounts whose plan serves it -------------------


def test_a_call_goes_only_to_accounts_whose_plan_serves_it() -> None:
    clock = FakeClock(NOON)
    configs = [*accounts("basic", plan="BASIC"), *accounts("pro", plan="PRO"), *accounts("plain")]
    chosen = AccountLimiter(
        configs, InMemoryUsageStore({"pro": usage(30)}), defaults=AccountLimits(44, 100.0, 100), clock=clock
    )  # "plain" declares none: CHART_IMG_PLAN's default, BASIC
    assert lease_id(chosen.acquire(max_wait=1, plans={"PRO"})) == "pro"  # though the most used
    assert lease_id(chosen.acquire(max_wait=1, plans={"PRO"}, tried=["pro"])) == "pro"  # no other
    assert lease_id(chosen.acquire(max_wait=1, plans={"BASIC", "PRO"})) in ("basic", "plain")
    leases = chosen.acquire_many([{"PRO"}, {"BASIC"}, {"PRO"}, None], max_wait=1)
    picked = [lease.account_id if lease else None for lease in leases]
    assert (picked[0], picked[2]) == ("pro", "pro") and picked[1] in ("basic", "plain")
    assert picked[3] is not None


def test_a_call_no_account_serves_has_no_account_and_none_is_reserved() -> None:
    clock = FakeClock(NOON)
    store = CountingStore({"pro": usage(44, dailyLimit=44)})
    configs = [*accounts("basic", plan="BASIC"), *accounts("pro", plan="PRO")]
    chosen = AccountLimiter(configs, store, defaults=AccountLimits(44, 100.0, 100), clock=clock)
    assert chosen.acquire(max_wait=1, plans={"PRO"}) == NoAccount(NoAccountReason.EXHAUSTED, ("pro",))
    assert chosen.acquire(max_wait=1, plans=frozenset()) == NoAccount(NoAccountReason.EXHAUSTED, ())
    assert store.reserves == ["pro"]  # the BASIC account was never asked
    assert chosen.acquire_many([{"ULTRA"}], max_wait=1) == [None]


def test_an_account_without_a_plan_has_the_configured_default() -> None:
    clock = FakeClock(NOON)
    chosen = AccountLimiter(
        accounts("plain"),
        InMemoryUsageStore(),
        defaults=AccountLimits(44, 100.0, 100),
        clock=clock,
        default_plan="pro",
    )
    assert lease_id(chosen.acquire(max_wait=1, plans={"PRO"})) == "plain"
    assert isinstance(chosen.acquire(max_wait=1, plans={"BASIC"}), NoAccount)


def test_a_200_on_a_key_held_aside_brings_it_back_for_every_instance(log_capture: Any) -> None:
    """An answer to a call sent before the key was disabled (or set aside) says the key works:
    as good as a probe."""
    clock = FakeClock(NOON)
    store = InMemoryUsageStore()
    chosen = limiter(store, accounts("a", "b"), clock)
    chosen.key_refused("a", Answer(401, request="x"))
    assert chosen.key_refused("a", Answer(401, request="y")) and store.snapshot()["a"]["disabled"] is True
    assert not chosen.still_accepted("a")
    chosen.succeeded("a")
    assert store.snapshot()["a"]["disabled"] is False and chosen.usable_accounts() == ("a", "b")
    assert [
        e["accountId"] for e in log_capture.events("chart-img key serves again: its probe answered 200")
    ] == ["a"]
    chosen.succeeded("a")  # nothing held any more: no write, no line
    assert len(log_capture.events("chart-img key serves again: its probe answered 200")) == 1
    chosen.rate_limited("b", TOO_MANY, None, probe=True)  # a probe answered 429: set aside again
    assert not chosen.still_accepted("b") and store.snapshot()["b"]["coolReason"].startswith(
        "429 streak: the probe"
    )


def test_a_call_whose_serving_keys_are_all_disabled_is_told_so() -> None:
    clock = FakeClock(NOON)
    configs = [*accounts("basic", plan="BASIC"), *accounts("pro", plan="PRO")]
    chosen = AccountLimiter(
        configs, InMemoryUsageStore(), defaults=AccountLimits(44, 100.0, 100), clock=clock
    )
    chosen.key_refused("pro", REFUSED, probe=True)
    assert chosen.acquire(max_wait=1, plans={"PRO"}) == NoAccount(NoAccountReason.NO_USABLE_KEY, ())
    assert chosen.usable_accounts({"PRO"}) == () and chosen.usable_accounts() == ("basic",)
    assert lease_id(chosen.acquire(max_wait=1, plans={"BASIC", "PRO"})) == "basic"


def test_a_slot_another_instance_took_sends_the_call_to_the_sooner_key_not_into_a_held_unit() -> None:
    """This process has never seen a or b; another instance has taken a's slots for 2 s and
    b's for 0.6 s. The old way reserved a at once and held its unit 2 s (lost if the
    instance died meanwhile; the call queued on a while b came sooner: bench_fleet's uneven
    spread). Now a unit is taken only when its slot is at most UNIT_HOLD_SECONDS away: the
    store's answer on a shows other instances reserving, so every account is read once;
    the pick chooses b, waits 0.6 s with no unit held, and reserves b at its slot."""
    clock = FakeClock(NOON)
    slot = NOON.timestamp()
    store = CountingStore({"a": usage(1, tat=slot + 2.0), "b": usage(1, tat=slot + 0.6)})
    chosen = limiter(store, accounts("a", "b"), clock, rate=1.0, burst=1)
    lease = chosen.acquire(max_wait=5.0)
    assert isinstance(lease, Lease) and lease.account_id == "b"
    assert store.reserves == ["a", "b"]  # a too far: nothing taken; b at its slot
    assert clock.sleeps == [pytest.approx(0.6)]  # before the reservation, none after it
    assert lease.reservation.send_at == clock.now()  # reserved at its slot
    assert lease.paced_seconds == pytest.approx(0.6)
    assert (store.snapshot()["a"]["usageToday"], store.snapshot()["b"]["usageToday"]) == (1, 2)


def test_choosing_again_after_slots_taken_meanwhile_ends_when_the_wait_allowed_does() -> None:
    """Another instance takes each slot just as this one comes for it: every round this
    process learns the slot, waits for it (no unit held), and finds it taken again. The
    rounds end when `max_wait` does: no time, nothing taken, never a wait past it."""

    class AlwaysLater(CountingStore):
        def reserve(self, account_id: str, **kwargs: Any) -> Any:
            with self._transaction() as docs:
                docs[account_id] = usage(1, tat=kwargs["now"].timestamp() + 1.0)
            return super().reserve(account_id, **kwargs)

    clock = FakeClock(NOON)
    store = AlwaysLater({"a": usage(1), "b": usage(1)})
    chosen = limiter(store, accounts("a", "b"), clock, rate=1.0, burst=1)
    assert chosen.acquire(max_wait=30.0) == NoAccount(NoAccountReason.NO_TIME, ())
    assert 20 <= len(store.reserves) <= 64 and sum(clock.sleeps) <= 30.0
    assert store.snapshot()["a"]["usageToday"] == 1 and store.snapshot()["b"]["usageToday"] == 1


def test_threads_racing_for_one_keys_slots_each_get_one_in_turn() -> None:
    """One key paced at 2/s (a slot every 0.56 s, more than UNIT_HOLD_SECONDS), 4 threads
    of this process acquiring at once, on the real clock (the outage and shared-key steps):
    each loser of a slot learns the next one and waits for it; every thread gets a lease,
    the slots at least one interval apart, one unit each. Judged by the store's slots, not
    by how long it took (a busy machine only makes the slots later)."""
    store = CountingStore()  # today, on the real clock, nothing used yet
    chosen = AccountLimiter(accounts("a"), store, defaults=AccountLimits(44, 2.0, 1), clock=SYSTEM_CLOCK)
    barrier = threading.Barrier(4)
    leases: list[Lease | NoAccount] = []

    def acquire() -> None:
        barrier.wait()
        leases.append(chosen.acquire(max_wait=120.0))

    threads = [threading.Thread(target=acquire) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(isinstance(lease, Lease) for lease in leases), leases
    sends = sorted(lease.reservation.send_at for lease in leases if isinstance(lease, Lease))
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sends)]
    assert all(gap >= 1 / (2.0 * 0.9) - SLOT_GRAIN for gap in gaps), gaps
    assert store.snapshot()["a"]["usageToday"] == 4


def test_a_key_whose_slot_is_taken_again_and_again_is_still_waited_for_while_time_remains() -> None:
    """The only account: another instance takes its slot the first 3 times this process
    comes for it (a shared BASIC key under three instances, or an outage's retries). Each
    time the slot is learned and waited for, no unit held; the 4th time it is this one's.
    Giving up after a count of rounds instead of when `max_wait` ends failed such steps
    with "no time" 8 s before their budget did."""

    class TakenThrice(CountingStore):
        def reserve(self, account_id: str, **kwargs: Any) -> Any:
            if len(self.reserves) < 3:
                with self._transaction() as docs:
                    docs[account_id] = usage(1, tat=kwargs["now"].timestamp() + 1.0)
            return super().reserve(account_id, **kwargs)

    clock = FakeClock(NOON)
    store = TakenThrice({"a": usage(1)})
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
    lease = chosen.acquire(max_wait=10.0)
    assert isinstance(lease, Lease) and store.reserves == ["a"] * 4
    assert clock.sleeps == [pytest.approx(1.0)] * 3 and lease.paced_seconds == pytest.approx(3.0)
    assert store.snapshot()["a"]["usageToday"] == 2


def test_a_slot_beyond_the_time_a_cooldown_leaves_is_no_time_at_once() -> None:
    """Cooling 0.2 s, 0.3 s to wait, and the store's slot 0.4 s away (0.2 s after the
    cooldown, more than the 0.1 s left): no unit is taken, though the slot is within
    UNIT_HOLD_SECONDS of the reservation; and no second round (no read of every account),
    since the slot is beyond the time left."""
    clock = FakeClock(NOON)
    store = ReadCountingStore({"a": usage(1, tat=NOON.timestamp() + 0.4)})
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
    chosen.rate_limited("a", TOO_MANY, 0.2)
    assert chosen.acquire(max_wait=0.3) == NoAccount(NoAccountReason.NO_TIME, ())
    assert store.reads == []
    assert clock.sleeps == [pytest.approx(0.2)] and store.snapshot()["a"]["usageToday"] == 1


def test_a_slot_exactly_as_far_as_the_time_left_is_still_waited_for() -> None:
    """Exact binary times: the store's slot 0.5 s away, 0.5 s to wait. It is further than
    the hold, so nothing is taken then; it is within the wait (at its very end), so the call
    waits for it and reserves it. Known ahead by this process, the same: waited for."""
    clock = FakeClock(NOON)
    store = CountingStore({"a": usage(1, tat=NOON.timestamp() + 0.5)})
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
    lease = chosen.acquire(max_wait=0.5)
    assert isinstance(lease, Lease) and lease.reservation.send_at == NOON + timedelta(seconds=0.5)
    assert store.reserves == ["a", "a"] and clock.sleeps == [0.5]
    known = chosen.acquire(max_wait=1.0)  # this process's own slot, exactly 1 s on
    assert isinstance(known, Lease) and known.reservation.send_at == NOON + timedelta(seconds=1.5)
    assert clock.sleeps == [0.5, 1.0] and store.reserves == ["a", "a", "a"]


def test_each_wait_before_a_reservation_counts_towards_the_time_waited() -> None:
    """While this call waits for its known slot (1 s), another thread of this process takes
    that slot: the call waits a second time for the next one. Its lease says 2 s waited,
    both waits, and that is what the step's budget was charged."""
    clock = FakeClock(NOON)
    store = CountingStore()
    chosen = limiter(store, accounts("a"), clock, rate=1.0, burst=1)
    assert lease_id(chosen.acquire(max_wait=0)) == "a"  # the slot of NOON, the next at +1 s
    sleep, others = clock.sleep, []

    def sleep_while_another_thread_reserves(seconds: float) -> None:
        sleep(seconds)
        if not others:
            others.append(chosen.acquire(max_wait=0))  # takes the slot this call waited for

    clock.sleep = sleep_while_another_thread_reserves  # type: ignore[method-assign]
    lease = chosen.acquire(max_wait=5.0)
    assert isinstance(others[0], Lease) and others[0].reservation.send_at == NOON + timedelta(seconds=1)
    assert isinstance(lease, Lease) and lease.reservation.send_at == NOON + timedelta(seconds=2)
    assert lease.paced_seconds == 2.0 and store.reserves == ["a", "a", "a"]
