"""Real and record modes against the local CHART-IMG stand-in (tests/harness/chart_img_server.py).

Real sockets on 127.0.0.1, real httpx, real time for latency and pacing; the wall clock
(`now`) is faked only where a test crosses UTC midnight.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import (
    PNG,
    ChartImgServer,
    FakeClock,
    chart_call,
    connections_all_free,
    find_secrets,
)
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.clock import SYSTEM_CLOCK, SystemClock
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.settings import Settings
from worker_chart_export.testing import InMemoryUsageStore


class WallClockFrom(SystemClock):
    """Real monotonic time and sleep (pacing, latency), the wall clock from `now`."""

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now()


class SleepsRecorded(SystemClock):
    """The real clock, noting every sleep the worker asks of it: its pacing waits, its backoffs."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)


FAST_RETRIES = RetryPolicy(
    backoff=Backoff(attempts=None, base=0.02, cap=0.1, jitter=0.02), min_attempt_seconds=0.2
)


@dataclass
class Harness:
    server: ChartImgServer
    logs: LogCapture
    tmp_path: Path
    results: list[ChartResult]
    wave_units: int = 0
    apis: list[Any] = field(default_factory=list)

    def api(
        self,
        accounts: Sequence[dict[str, Any]],
        *,
        store: InMemoryUsageStore | None = None,
        now: Callable[[], datetime] | None = None,
        clock: SystemClock = SYSTEM_CLOCK,
        **settings: Any,
    ) -> Any:
        config = [{**a, "apiKey": a.get("apiKey") or self.server.add_account(a["id"])} for a in accounts]
        values: dict[str, Any] = {
            "charts_api_mode": "real",
            "chart_img_base_url": self.server.base_url,
            "chart_img_accounts_json": SecretStr(json.dumps(config)),
            "chart_img_request_timeout_seconds": 5.0,
            "chart_img_rate_per_second": 50.0,
            "chart_img_burst": 20,
            "chart_concurrency": 8,
            "charts_fixtures_dir": self.tmp_path / "fixtures",
            **settings,
        }
        clock = WallClockFrom(now) if now else clock
        api = build_chart_api(
            Settings(**values),
            store or InMemoryUsageStore(),
            seams=Seams(clock=clock, retry_policy=FAST_RETRIES),
        )
        self.apis.append(api)
        return api

    def render(self, api: Any, call: ChartCall, budget_seconds: float = 20.0) -> ChartResult:
        """`call` as a step of one chart: in a chart session of its own."""
        with api.for_step([], Budget.starting_now(budget_seconds, SYSTEM_CLOCK)) as step:
            return self.render_in(step, call)

    def render_in(self, session: Any, call: ChartCall) -> ChartResult:
        result: ChartResult = session.render(call)
        self.results.append(result)
        return result

    def render_all(
        self,
        api: Any,
        calls: Sequence[ChartCall],
        workers: int = 8,
        *,
        prepared: bool = False,
        store: InMemoryUsageStore | None = None,
    ) -> list[ChartResult]:
        """As execute.py runs a step: `prepared`, inside the first wave's reservation (then
        `wave_units` is what `store` counted when the wave began)."""
        budget = Budget.starting_now(60.0, SYSTEM_CLOCK)
        wave = calls[:workers] if prepared else []
        with api.for_step(wave, budget) as step, ThreadPoolExecutor(max_workers=workers) as pool:
            if store is not None:
                self.wave_units = sum(d.get("usageToday", 0) for d in store.snapshot().values())
            futures = [pool.submit(contextvars.copy_context().run, step.render, c) for c in calls]
            results = [f.result() for f in futures]
        self.results.extend(results)
        return results


@pytest.fixture
def h(chart_img_server: ChartImgServer, log_capture: LogCapture, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(chart_img_server, log_capture, tmp_path, [])
    yield harness
    # nothing the worker produced may hold a key: log lines, failures as the manifest keeps them
    texts = [log_capture.text, *map(repr, harness.results)]
    texts += [json.dumps(r.error.to_dict()) for r in harness.results if isinstance(r, ChartFailure)]
    assert harness.server.keys, "the test configured no key: the scan would prove nothing"
    assert find_secrets(texts, harness.server.keys) == []
    assert all(connections_all_free(api) for api in harness.apis), "an attempt kept its connection"


def code(result: ChartResult) -> str:
    assert isinstance(result, ChartFailure), result
    return result.error.code.value


def details(result: ChartResult) -> dict[str, Any]:
    assert isinstance(result, ChartFailure), result
    return result.error.details


# --- accounts ------------------------------------------------------------------------------


def test_429_rotates_across_three_accounts(h: Harness) -> None:
    keys = {a: h.server.add_account(a, daily_quota=q) for a, q in (("acc1", 0), ("acc2", 0), ("acc3", None))}
    store = InMemoryUsageStore()
    api = h.api([{"id": a, "apiKey": k} for a, k in keys.items()], store=store)
    result = h.render(api, chart_call("tpl_a"))
    assert result == ChartSuccess(PNG, "acc3")
    assert [(r.account_id, r.status, r.message) for r in h.server.requests] == [
        ("acc1", 429, "Limit Exceeded"),
        ("acc2", 429, "Limit Exceeded"),
        ("acc3", 200, None),
    ]
    # a 429 is refused before it is counted: acc1's and acc2's units given back (an exhaustion
    # is a field of its own), acc3's the chart's
    usage = store.snapshot()
    assert [usage[a]["usageToday"] for a in ("acc1", "acc2", "acc3")] == [0, 0, 1]
    assert [usage[a].get("refundedToday", 0) for a in ("acc1", "acc2", "acc3")] == [1, 1, 0]
    assert "exhaustedUntil" in usage["acc1"] and "exhaustedUntil" in usage["acc2"]
    h.render(api, chart_call("tpl_b"))  # the burnt accounts are not tried again today
    assert [r.account_id for r in h.server.requests][3:] == ["acc3"]


def test_a_prepaid_lease_on_an_account_refused_since_is_not_used(h: Harness) -> None:
    keys = {"acc1": h.server.add_account("acc1", daily_quota=0), "acc2": h.server.add_account("acc2")}
    store = InMemoryUsageStore()
    api = h.api([{"id": a, "apiKey": k} for a, k in keys.items()], store=store)
    calls = [chart_call(f"tpl_{i}") for i in range(4)]
    with api.for_step(calls, Budget.starting_now(20.0, SYSTEM_CLOCK)) as step:
        assert {a: d["usageToday"] for a, d in store.snapshot().items()} == {"acc1": 2, "acc2": 2}
        results = [h.render_in(step, call) for call in calls]  # one after another: the order is known
    assert results == [ChartSuccess(PNG, "acc2")] * 4
    # acc1's first lease met "Limit Exceeded"; its second was dropped, not sent
    assert [(r.account_id, r.status) for r in h.server.requests] == [
        ("acc1", 429),
        ("acc2", 200),
        ("acc2", 200),
        ("acc2", 200),
        ("acc2", 200),
    ]
    assert store.snapshot()["acc2"]["usageToday"] == 4


def test_a_wave_that_reached_the_daily_limit_still_sends_what_it_reserved(h: Harness) -> None:
    store = InMemoryUsageStore()
    api = h.api([{"id": "acc1", "dailyLimit": 2}], store=store)
    calls = [chart_call(f"tpl_{i}") for i in range(4)]
    # 2 units, then the limit: known
    with api.for_step(calls, Budget.starting_now(20.0, SYSTEM_CLOCK)) as step:
        results = [h.render_in(step, call) for call in calls]
    assert results[:2] == [ChartSuccess(PNG, "acc1")] * 2
    assert [code(r) for r in results[2:]] == ["CHART_API_LIMIT_EXCEEDED"] * 2
    assert h.server.count() == 2 and store.snapshot()["acc1"]["usageToday"] == 2


def test_what_a_wave_did_not_use_is_dropped_when_it_ends(h: Harness) -> None:
    """Never carried to a later run of the same step, whose day or slots it would not fit;
    the units of the leases no call used are given back (nothing was sent with them)."""
    store = InMemoryUsageStore()
    api = h.api([{"id": "acc1"}], store=store)
    calls = [chart_call(f"tpl_{i}") for i in range(3)]
    with api.for_step(calls, Budget.starting_now(20.0, SYSTEM_CLOCK)) as step:
        h.render_in(step, calls[0])  # the others abandoned before they started
    assert (store.snapshot()["acc1"]["usageToday"], store.snapshot()["acc1"]["refundedToday"]) == (1, 2)
    assert h.render(api, calls[1]) == ChartSuccess(PNG, "acc1")  # a unit of its own
    assert store.snapshot()["acc1"]["usageToday"] == 2 and h.server.count() == 2


@pytest.mark.parametrize("prepared", [False, True], ids=["one-by-one", "wave"])
def test_exhausted_accounts_get_no_http_call_and_one_error_event(h: Harness, prepared: bool) -> None:
    # the day the worker sees, fixed: a day read from the wall clock (once at import, it was)
    # is yesterday for a test that runs past midnight UTC, whose worker then starts a new count
    clock = FakeClock(datetime(2025, 6, 30, 12, 0, tzinfo=UTC))
    full = {"usageToday": 44, "windowStart": "2025-06-30T00:00:00Z"}
    store = InMemoryUsageStore({"acc1": full, "acc2": full})
    api = h.api([{"id": "acc1"}, {"id": "acc2"}], store=store, now=clock.now)
    results = h.render_all(api, [chart_call(f"tpl_{i}") for i in range(4)], prepared=prepared)
    assert {code(r) for r in results} == {"CHART_API_LIMIT_EXCEEDED"}
    assert details(results[0])["exhaustedAccounts"] == ["acc1", "acc2"]
    assert h.server.count() == 0
    (event,) = h.logs.events("chart-img accounts exhausted")
    assert event["severity"] == "ERROR"
    assert event["error"] == {"code": "CHART_API_LIMIT_EXCEEDED"}
    assert event["exhaustedAccounts"] == ["acc1", "acc2"]
    assert (event["runId"], event["stepId"], event["service"], event["env"]) == (
        "run-1",
        "step-1",
        "worker-chart-export",
        "test",
    )


def test_daily_window_resets_at_utc_midnight(h: Harness) -> None:
    clock = FakeClock(datetime(2025, 6, 30, 23, 59, 50, tzinfo=UTC))
    store = InMemoryUsageStore({"acc1": {"usageToday": 5, "windowStart": "2025-06-30T00:00:00Z"}})
    api = h.api([{"id": "acc1", "dailyLimit": 5}], store=store, now=clock.now)
    assert code(h.render(api, chart_call("tpl_a"))) == "CHART_API_LIMIT_EXCEEDED"
    assert h.server.count() == 0
    clock.advance(15)  # 00:00:05 UTC on July 1st
    assert h.render(api, chart_call("tpl_a")) == ChartSuccess(PNG, "acc1")
    window = {k: v for k, v in store.snapshot()["acc1"].items() if k != "tat"}  # tat: the pacing
    assert window == {"usageToday": 1, "windowStart": "2025-07-01T00:00:00Z"}


@pytest.mark.parametrize("prepared", [False, True], ids=["one-by-one", "wave"])
def test_usage_is_counted_once_per_real_call_under_concurrency(h: Harness, prepared: bool) -> None:
    store = InMemoryUsageStore()
    api = h.api([{"id": "acc1"}, {"id": "acc2"}, {"id": "acc3"}], store=store)
    h.server.script(symbol="BINANCE:ETHUSDT", fail_times=3, latency=0.02)  # some calls retried
    calls = [
        chart_call(f"tpl_{i}", symbol="BINANCE:ETHUSDT" if i % 4 == 0 else "BINANCE:BTCUSDT")
        for i in range(16)
    ]
    results = h.render_all(api, calls, prepared=prepared, store=store)
    assert h.wave_units == (8 if prepared else 0)  # the first wave, reserved before it starts
    assert all(isinstance(r, ChartSuccess) for r in results)
    used = {a: doc["usageToday"] for a, doc in store.snapshot().items()}
    assert sum(used.values()) == h.server.count() == 16 + 3
    assert used == {a: h.server.count(a) for a in used}
    assert len(used) == 3  # spread over the accounts


# --- retries and final answers -------------------------------------------------------------


def test_500_forever_makes_exactly_five_requests(h: Harness) -> None:
    h.server.script(symbol="BINANCE:BTCUSDT", fail_times=1000)
    api = h.api([{"id": "acc1"}])
    result = h.render(api, chart_call("tpl_a"))
    assert code(result) == "CHART_API_FAILED"
    assert details(result)["httpStatus"] == 500
    assert details(result)["message"] == "Something Went Wrong"
    assert details(result)["attempts"] == 5
    assert h.server.statuses() == [500] * 5


def attempt_timeouts(h: Harness) -> list[float]:
    """The time each HTTP attempt was given, as the worker logged it when it started."""
    return [event["timeoutSeconds"] for event in h.logs.events("chart api attempt started")]


def test_a_hanging_server_is_given_the_request_timeout_on_each_attempt(h: Harness) -> None:
    h.server.script(symbol="BINANCE:BTCUSDT", hang=10.0)
    api = h.api([{"id": "acc1"}], chart_img_request_timeout_seconds=0.3)
    result = h.render(api, chart_call("tpl_a"), budget_seconds=20.0)
    assert code(result) == "CHART_API_FAILED"
    assert details(result)["errorKind"] == "timeout"
    assert details(result)["attempts"] == 5
    assert h.server.count() == 5
    assert attempt_timeouts(h) == [0.3] * 5  # not the server's 10 s


def test_hang_longer_than_the_budget_is_cut_at_the_budget(h: Harness) -> None:
    h.server.script(symbol="BINANCE:BTCUSDT", hang=10.0)
    api = h.api([{"id": "acc1"}], chart_img_request_timeout_seconds=5.0)
    result = h.render(api, chart_call("tpl_a"), budget_seconds=2.0)
    assert details(result)["attempts"] == 1  # the budget was spent on it: no second one
    [given] = attempt_timeouts(h)
    assert 0 < given <= 2.0  # what the budget had left, not the request timeout's 5 s


def test_200_that_is_not_a_png_is_tried_again(h: Harness) -> None:
    h.server.register_template("tpl_html", {"width": 640})
    h.server.script(template="tpl_html", non_png=True)
    api = h.api([{"id": "acc1"}])
    result = h.render(api, chart_call("tpl_html", {"width": 640}))
    assert code(result) == "CHART_API_FAILED"
    assert (details(result)["contentType"], details(result)["errorKind"]) == ("text/html", "not_png")
    assert h.server.count() == 5  # a bad moment: each attempt made


def test_422_and_403_are_final_after_one_request(h: Harness) -> None:
    h.server.invalid_symbols.add("BINANCE:NOPE")
    h.server.register_template("tpl_forbidden", {"width": 1920, "theme": "dark"})
    basic = [{"id": a, "apiKey": h.server.add_account(a, plan="BASIC")} for a in ("acc1", "acc2")]
    api = h.api(basic)
    invalid = h.render(api, chart_call("tpl_a", symbol="BINANCE:NOPE"))
    assert (code(invalid), details(invalid)["httpStatus"], details(invalid)["message"]) == (
        "CHART_API_FAILED",
        422,
        "Invalid Symbol",
    )
    assert h.server.count() == 1
    forbidden = h.render(api, chart_call("tpl_forbidden", {"width": 1920, "theme": "dark"}))
    assert (details(forbidden)["httpStatus"], details(forbidden)["message"]) == (
        403,
        "Exceed Max Usage Resolution Limit (800x600)",
    )
    assert "tpl_forbidden" in forbidden.error.message  # type: ignore[union-attr]
    assert [(r.template, r.status) for r in h.server.requests] == [(None, 422), ("tpl_forbidden", 403)]


def test_a_422_array_reaches_the_failure_details(h: Harness) -> None:
    api = h.api([{"id": "acc1"}])
    result = h.render(api, chart_call("tpl_small", {"width": 300, "height": 200}))
    assert code(result) == "CHART_API_FAILED" and details(result)["httpStatus"] == 422
    assert details(result)["errors"] == [
        {"param": "width", "msg": "must be at least 400"},
        {"param": "height", "msg": "must be at least 300"},
    ]


def test_a_parameter_limit_403_is_final(h: Harness) -> None:
    api = h.api([{"id": "acc1", "apiKey": h.server.add_account("acc1", plan="BASIC")}])
    studies = [{"name": n} for n in ("Volume", "MACD", "Relative Strength Index", "Stochastic")]
    result = h.render(api, chart_call("tpl_busy", {"studies": studies}))
    assert details(result)["message"] == "Exceed Max Usage Parameter Limit (3)"
    assert h.server.count() == 1


def test_an_unknown_key_is_skipped_for_the_next_account_and_disabled_when_refused_again(h: Harness) -> None:
    api = h.api([{"id": "acc1", "apiKey": "test-key-" + "0" * 32}, {"id": "acc2"}])
    assert h.render(api, chart_call("tpl_a", symbol="BINANCE:AUSDT")) == ChartSuccess(PNG, "acc2")
    assert [r.status for r in h.server.requests] == [403, 200]
    assert h.logs.events("chart-img account key refused: account disabled") == []  # once is no proof
    # another request refused on it too (no success between): the key, not the request
    assert h.render(api, chart_call("tpl_b", symbol="BINANCE:BUSDT")) == ChartSuccess(PNG, "acc2")
    # then the known-good chart on acc1: refused too
    assert [r.status for r in h.server.requests] == [403, 200, 403, 200, 403]
    (event,) = h.logs.events("chart-img account key refused: account disabled")
    assert event["accountId"] == "acc1" and event["severity"] == "ERROR"
    assert h.render(api, chart_call("tpl_c")) == ChartSuccess(PNG, "acc2")
    assert [r.status for r in h.server.requests] == [403, 200, 403, 200, 403, 200]  # acc1 not again


def test_an_unknown_key_alone_is_final(h: Harness) -> None:
    api = h.api([{"id": "acc1", "apiKey": "test-key-" + "0" * 32}])
    h.server.add_account("other")  # a real key exists: the leak scan then means something
    result = h.render(api, chart_call("tpl_a", symbol="BINANCE:AUSDT"))
    assert (details(result)["httpStatus"], details(result)["message"]) == (403, "Forbidden")
    assert details(result)["errorKind"] == "request_refused"  # one request, one key: no proof
    assert h.server.count() == 1  # every key refused this request: its final failure
    result = h.render(api, chart_call("tpl_b", symbol="BINANCE:BUSDT"))  # another: the key then
    assert details(result)["disabledAccounts"] == ["acc1"]
    # refused for a second request and for the known-good chart: disabled, nothing left
    assert h.server.count() == 3


# --- record, then replay -------------------------------------------------------------------


def test_record_then_mock_replay_gives_the_same_results(h: Harness) -> None:
    h.server.invalid_symbols.add("BINANCE:NOPE")
    h.server.register_template("tpl_forbidden", {"width": 1920})
    h.server.script(template="tpl_forbidden", status=403, message="Exceed Max Usage Parameter Limit (3)")
    h.server.register_template("tpl_flaky", {"width": 1000})
    h.server.script(template="tpl_flaky", fail_times=1)  # recorded: the final PNG
    h.server.register_template("tpl_down", {"width": 1001})
    h.server.script(template="tpl_down", fail_times=99)  # a 5xx is the moment: never recorded
    calls = [
        chart_call("tpl_ok"),
        chart_call("tpl_bad", symbol="BINANCE:NOPE"),
        chart_call("tpl_forbidden", {"width": 1920}),
        chart_call("tpl_flaky", {"width": 1000}),
        chart_call("tpl_down", {"width": 1001}),
    ]
    recorder = h.api([{"id": "acc1"}], charts_api_mode="record")
    recorded = h.render_all(recorder, calls)
    sent = h.server.count()
    assert sent == 1 + 1 + 1 + 2 + 5
    names = sorted(p.name for p in (h.tmp_path / "fixtures/chart-img/advanced-chart-v2").iterdir())
    assert names == [
        "BINANCE_BTCUSDT__1h__tpl_flaky.png",
        "BINANCE_BTCUSDT__1h__tpl_forbidden__403_EXCEED_MAX_USAGE_PARAMETER_LIMIT_3.json",
        "BINANCE_BTCUSDT__1h__tpl_ok.png",
        "BINANCE_NOPE__1h__tpl_bad__422_INVALID_SYMBOL.json",
    ]
    # record mode replays what it has: no new request, except for what it did not keep
    calls.pop()  # tpl_down: nothing recorded, so record would call again and mock finds nothing
    recorded.pop()
    again = h.render_all(recorder, calls)
    mock = MockChartApi(FixtureLibrary(h.tmp_path / "fixtures"))
    replayed = h.render_all(mock, calls)
    assert h.server.count() == sent

    def shape(result: ChartResult) -> Any:
        if isinstance(result, ChartSuccess):
            return result.png
        return (result.error.code, result.error.details["httpStatus"], result.error.details["message"])

    assert [shape(r) for r in replayed] == [shape(r) for r in recorded] == [shape(r) for r in again]
    assert shape(recorded[0]) == PNG


# --- pacing --------------------------------------------------------------------------------


@pytest.mark.parametrize("prepared", [False, True], ids=["one-by-one", "wave"])
def test_eight_concurrent_requests_on_one_basic_account_stay_within_its_rate(
    h: Harness, prepared: bool
) -> None:
    """1/s burst 3 at the server, which answers 429 past it: our pacing must never get one."""
    key = h.server.add_account("basic", rate=1.0, burst=3)
    store = InMemoryUsageStore()
    api = h.api([{"id": "basic", "apiKey": key, "ratePerSecond": 1, "burst": 3}], store=store)
    h.server.script(symbol="BINANCE:BTCUSDT", latency=0.05)
    results = h.render_all(api, [chart_call(f"tpl_{i}") for i in range(8)], prepared=prepared, store=store)
    # the wave prepays the slots at most 0.25 s ahead: two now (the burst's third keeps 0.3 s
    # back for late arrivals); the others reserve when their slot comes, one a second
    assert h.wave_units == (2 if prepared else 0)
    assert all(isinstance(r, ChartSuccess) for r in results), [getattr(r, "error", None) for r in results]
    assert h.server.statuses() == [200] * 8
    assert h.server.max_in_flight("basic") <= 3
    arrivals = sorted(r.arrived for r in h.server.requests)
    for i in range(3, 8):  # request i needs i-2 refills since the burst: (i - 2) / rate seconds
        assert arrivals[i] - arrivals[0] >= (i - 2) * 1.0 - 0.01
    assert api.limiter.exhausted_accounts() == ()  # not burnt by our own pacing
    assert store.snapshot()["basic"]["usageToday"] == 8


def test_concurrent_requests_spread_over_accounts_with_tokens(h: Harness) -> None:
    accounts = [
        {"id": a, "apiKey": h.server.add_account(a, rate=1.0, burst=3), "ratePerSecond": 1, "burst": 3}
        for a in ("a1", "a2", "a3")
    ]
    clock = SleepsRecorded()
    api = h.api(accounts, clock=clock)
    h.server.script(symbol="BINANCE:BTCUSDT", latency=0.1)
    results = h.render_all(api, [chart_call(f"tpl_{i}") for i in range(8)])
    assert all(isinstance(r, ChartSuccess) for r in results)
    # nobody waited for a refill (1.11 s at the paced 0.9/s), at most for the 0.3 s the burst
    # keeps back for late arrivals (a third call on one key)
    assert all(wait < 1.0 for wait in clock.sleeps), clock.sleeps
    assert sorted(h.server.count(a) for a in ("a1", "a2", "a3")) == [2, 3, 3]
    assert 429 not in h.server.statuses()
