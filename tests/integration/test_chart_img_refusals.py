"""429s and 401s against the CHART-IMG stand-in (tests/harness/chart_img_server.py), with the
real HTTP client on real sockets: which answers cool a key, exhaust it for the day, set it
aside until a probe, or disable it, and that no answer we cannot name retires a key on first
sight; and who is blamed (issue 26): CHART-IMG-wide throttling and a request-caused 401
retire no key.

The worker's clock is a FakeClock: cooldowns, Retry-After, the "over a minute" of the 429
streak and the 15 minutes before a probe pass without waiting. The usage store is run-local's
file: what is persisted is read back as a second instance and `worker-chart-export accounts`
would read it (core.chart_img.account_status). Each template is its own request (its own symbol).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
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
from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.account_status import AccountState, account_row
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.settings import Settings

MIDNIGHT = "2025-01-16T00:00:00.000Z"  # after the FakeClock's 2025-01-15 12:00 UTC
STREAK_ERROR = "chart-img key keeps answering 429: set aside, then probed"
DISABLED_ERROR = "chart-img account key refused: account disabled"
COOLING = "chart-img key rate-limited: cooling down"


@dataclass
class Stand:
    server: ChartImgServer
    clock: FakeClock
    store: FileUsageStore
    logs: LogCapture
    keys: dict[str, str] = field(default_factory=dict)
    apis: list[Any] = field(default_factory=list)
    results: list[ChartResult] = field(default_factory=list)

    def instance(self, *account_ids: str, rate: float = 50.0, burst: int = 20, attempts: int = 5) -> Any:
        """A worker instance (its own limiter) on the shared usage file and the fake clock."""
        for account_id in account_ids:
            self.keys.setdefault(account_id, self.server.add_account(account_id))
        config = [{"id": a, "apiKey": self.keys[a]} for a in account_ids]
        settings = Settings(
            charts_api_mode="real",
            chart_img_base_url=self.server.base_url,
            chart_img_accounts_json=SecretStr(json.dumps(config)),
            chart_img_request_timeout_seconds=5.0,
            chart_img_rate_per_second=rate,
            chart_img_burst=burst,
            chart_img_max_attempts=attempts,
            charts_fixtures_dir=Path("/nonexistent"),
        )
        policy = RetryPolicy(backoff=Backoff(attempts=None, base=0.5, cap=4.0))
        api = build_chart_api(settings, self.store, seams=Seams(clock=self.clock, retry_policy=policy))
        self.apis.append(api)
        return api

    def render(self, api: Any, template: str = "tpl_a") -> ChartResult:
        """One chart as a step of its own, within a 60 s budget on the fake clock."""
        return self.step(api, template)[0]

    def step(self, api: Any, *templates: str) -> list[ChartResult]:
        """A step of these charts (each its own request: its own symbol), rendered one after
        another within a 60 s budget on the fake clock, its first wave reserved at once."""
        calls = [chart_call(t, symbol=f"BINANCE:{t.upper()}") for t in templates]
        with api.for_step(calls, Budget.starting_now(60.0, self.clock)) as step:
            results: list[ChartResult] = [step.render(call) for call in calls]
        self.results += results
        return results

    def answers(self) -> list[tuple[str | None, int | None, str | None]]:
        return [(r.account_id, r.status, r.message) for r in self.server.requests]

    def doc(self, account_id: str) -> dict[str, Any]:
        return dict(self.store.read_all().get(account_id, {}))

    def row(self, account_id: str) -> Any:
        """The account as `worker-chart-export accounts` shows it."""
        return account_row(account_id, self.doc(account_id), None, self.clock.now())


@pytest.fixture
def stand(chart_img_server: ChartImgServer, log_capture: LogCapture, tmp_path: Path) -> Iterator[Stand]:
    start = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
    made = Stand(chart_img_server, FakeClock(start), FileUsageStore(tmp_path / "usage.json"), log_capture)
    yield made
    texts = [log_capture.text, *map(repr, made.results), json.dumps(made.store.read_all())]
    texts += [json.dumps(r.error.to_dict()) for r in made.results if isinstance(r, ChartFailure)]
    assert made.keys and find_secrets(texts, made.keys.values()) == []
    assert all(connections_all_free(api) for api in made.apis), "an attempt kept its connection"


def usable(api: Any, *account_ids: str) -> bool:
    """Neither disabled nor exhausted in this instance."""
    limiter, wanted = api.limiter, set(account_ids)
    return wanted <= set(limiter.usable_accounts()) and not wanted & set(limiter.exhausted_accounts())


# --- 429: cooled, or exhausted for the day ------------------------------------------------


@pytest.mark.parametrize(
    "refusal",
    [
        {},  # the documented "Too Many Requests"
        {"empty_body": True},
        {"fail_message": "Quota Gone", "undocumented": True},
        {"fail_message": "Rate Limit Exceeded", "undocumented": True},
    ],
    ids=["too-many-requests", "empty-body", "unknown-wording", "rate-limit-exceeded"],
)
def test_a_429_that_is_not_the_daily_limit_cools_the_key_and_the_call_moves_on(
    stand: Stand, refusal: dict[str, Any]
) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], fail_times=1, fail_status=429, **refusal)
    assert stand.render(api) == ChartSuccess(PNG, "acc2")
    assert [(a, s) for a, s, _ in stand.answers()] == [("acc1", 429), ("acc2", 200)]
    # it may be CHART-IMG throttling every key: the next attempt waits its backoff first
    assert stand.clock.sleeps == [pytest.approx(0.5)]
    assert usable(api, "acc1", "acc2")
    row = stand.row("acc1")  # what `accounts` shows: neither exhausted nor disabled
    # refused before it was counted: its unit given back
    assert (row.exhausted_until, row.disabled, row.used_today) == (None, False, 0)
    (cooling,) = stand.logs.events("chart-img key rate-limited: cooling down")
    assert (cooling["accountId"], cooling["cooldownSeconds"]) == ("acc1", 1.0)
    stand.clock.advance(1.0)  # the cooldown is over: the same key serves the next chart
    assert stand.render(api, "tpl_b") == ChartSuccess(PNG, "acc1")


def test_limit_exceeded_exhausts_the_key_for_the_day_for_every_instance(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], status=429, message="Limit Exceeded")
    assert stand.render(api) == ChartSuccess(PNG, "acc2")
    assert stand.answers() == [("acc1", 429, "Limit Exceeded"), ("acc2", 200, None)]
    assert api.limiter.exhausted_accounts() == ("acc1",)
    doc = stand.doc("acc1")
    # not the limit: the exhaustion is a field of its own (issue 27), and the 429 was refused
    # before it was counted, its unit given back (issue 37)
    assert (doc["usageToday"], doc["refundedToday"], doc["exhaustedUntil"]) == (0, 1, MIDNIGHT)
    assert doc["exhaustedReason"] == 'CHART-IMG answered 429 "Limit Exceeded": the day\'s quota'
    row = stand.row("acc1")
    assert (row.state, row.left_today, row.exhausted_reason) == (
        AccountState.EXHAUSTED,
        0,
        doc["exhaustedReason"],
    )
    other = stand.instance("acc1", "acc2")  # another instance, started after: never calls acc1
    assert [stand.render(other, f"tpl_{i}") for i in range(3)] == [ChartSuccess(PNG, "acc2")] * 3
    assert stand.server.count("acc1") == 1
    assert stand.logs.events(STREAK_ERROR) == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), (format_datetime(datetime(2025, 1, 15, 12, 0, 5, tzinfo=UTC), usegmt=True), 5.0)],
    ids=["delay-seconds", "http-date"],
)
def test_retry_after_is_honoured_on_the_only_key(stand: Stand, header: str, seconds: float) -> None:
    api = stand.instance("acc1")
    stand.server.script(key=stand.keys["acc1"], fail_times=1, fail_status=429, retry_after=header)
    assert stand.render(api) == ChartSuccess(PNG, "acc1")
    assert [(a, s) for a, s, _ in stand.answers()] == [("acc1", 429), ("acc1", 200)]
    assert [s for s in stand.clock.sleeps if s > 0.5] == [pytest.approx(seconds)]  # then the same key
    (cooling,) = stand.logs.events("chart-img key rate-limited: cooling down")
    assert (cooling["cooldownSeconds"], cooling["retryAfterSeconds"]) == (pytest.approx(seconds), seconds)
    assert usable(api, "acc1")


def test_a_cooling_key_is_reserved_only_once_its_cooldown_is_over(stand: Stand) -> None:
    """Issue 27: a unit reserved before a cooldown is held through it (up to 30 s in a
    CHART-IMG-wide throttle) and lost, counted though no call left, when the instance dies
    meanwhile (the chaos benchmark: 12 units for 0 calls after a kill). The cooldown is
    waited out first, with nothing reserved; the unit is taken just before the call."""
    api = stand.instance("acc1")
    stand.server.script(key=stand.keys["acc1"], fail_times=1, fail_status=429)  # then 200
    counted_while_cooling: list[int] = []
    sleep = stand.clock.sleep

    def watching(seconds: float) -> None:
        counted_while_cooling.append(stand.doc("acc1")["usageToday"])
        sleep(seconds)

    stand.clock.sleep = watching  # type: ignore[method-assign]
    assert stand.render(api) == ChartSuccess(PNG, "acc1")
    assert [(a, s) for a, s, _ in stand.answers()] == [("acc1", 429), ("acc1", 200)]
    # the backoff (0.5 s), then what is left of the 1 s cooldown: nothing counted through
    # either (the 429's unit given back, the retry's not yet taken)
    assert sum(stand.clock.sleeps) == pytest.approx(1.0) and counted_while_cooling == [0, 0]
    assert stand.doc("acc1")["usageToday"] == 1 and len(stand.server.requests) == 2


def test_a_unit_is_reserved_when_its_slot_comes_not_before(stand: Stand) -> None:
    """Issue 27: a step's first wave reserved every first attempt at once, each waiting for
    its paced slot with its unit counted (up to the step's budget): an instance killed
    meanwhile left 3 units counted for calls that never left. The wave now prepays only
    slots at most 0.25 s ahead, and a call waits for its slot before it reserves."""
    api = stand.instance("acc1", rate=1.0, burst=1)  # paced at 0.9/s: a slot every 1.11 s
    counted_while_waiting: list[int] = []
    sleep = stand.clock.sleep

    def watching(seconds: float) -> None:
        counted_while_waiting.append(stand.doc("acc1")["usageToday"])
        sleep(seconds)

    stand.clock.sleep = watching  # type: ignore[method-assign]
    results = stand.step(api, "tpl_a", "tpl_b", "tpl_c")
    assert results == [ChartSuccess(PNG, "acc1")] * 3
    assert stand.clock.sleeps == [pytest.approx(1.111, abs=1e-3)] * 2  # one slot each
    assert counted_while_waiting == [1, 2]  # only the calls already sent were counted
    assert stand.doc("acc1")["usageToday"] == 3 == len(stand.server.requests)


def test_the_only_key_answering_429_for_minutes_is_never_set_aside(stand: Stand) -> None:
    """One key, answering 429 for ever: nobody else serves, so nobody is to blame (it may be
    CHART-IMG throttling): the key only cools down, escalating, and is never set aside."""
    api = stand.instance("acc1")
    stand.server.script(key=stand.keys["acc1"], status=429)  # "Too Many Requests", for ever
    results = [stand.render(api, f"tpl_{i}") for i in range(4)]
    assert all(isinstance(r, ChartFailure) for r in results)
    # at most three attempts each, each after the key's escalating cooldown, within the budget
    assert set(stand.answers()) == {("acc1", 429, "Too Many Requests")} and len(stand.answers()) >= 7
    assert stand.clock.elapsed > 60  # over a minute of 429s
    assert stand.logs.events(STREAK_ERROR) == [] and usable(api, "acc1")
    assert not {"coolUntil", "exhaustedUntil"} & set(stand.doc("acc1"))
    failed = results[-1]
    assert isinstance(failed, ChartFailure) and failed.error.details["limit"] == "rate"
    assert all(e["chartImgThrottling"] for e in stand.logs.events(COOLING))  # every usable key hears 429
    stand.server.script(key=stand.keys["acc1"])  # the 429s stop
    assert stand.render(api, "tpl_next") == ChartSuccess(PNG, "acc1")  # after its cooldown, at most 30 s


def test_429s_on_one_key_while_another_serves_set_it_aside_and_a_probe_within_15_minutes_decides(
    stand: Stand,
) -> None:
    """acc1 alone keeps answering 429 while acc2 serves: acc1's problem. It is set aside (not
    exhausted till midnight), then probed: a probe answered 429 sets it aside again, a probe
    answered 200 brings it back, each within 15 minutes on the injected clock."""
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], status=429, empty_body=True)
    for i in range(12):
        assert stand.render(api, f"tpl_{i}") == ChartSuccess(PNG, "acc2")
        stand.clock.advance(10.0)
    (event,) = stand.logs.events(STREAK_ERROR)
    assert (event["rule"], event["answers"]) == (
        "429 streak",
        [{"httpStatus": 429, "message": "", "times": event["answered429"]}],
    )
    assert event["spanSeconds"] > 60 and event["cooldowns"] >= 5 and usable(api, "acc2")
    set_aside_at = stand.clock.now()
    row = stand.row("acc1")  # what `accounts` shows: set aside by the 429 rule, until when
    assert row.state is AccountState.COOLING and row.cooling_reason.startswith("429 streak: ")
    assert row.exhausted_until is None and row.cooling_until is not None
    assert set_aside_at < row.cooling_until <= set_aside_at + timedelta(minutes=15)
    calls_then = stand.server.count("acc1")

    while stand.clock.now() < row.cooling_until:  # set aside: no call on acc1
        assert stand.render(api, "tpl_during") == ChartSuccess(PNG, "acc2")
        stand.clock.advance(60.0)
    assert stand.server.count("acc1") == calls_then
    assert stand.render(api, "tpl_probe") == ChartSuccess(PNG, "acc2")  # acc1's probe: 429 again
    assert stand.server.count("acc1") == calls_then + 1
    assert len(stand.logs.events(STREAK_ERROR)) == 2 and stand.row("acc1").state is AccountState.COOLING

    stand.server.script(key=stand.keys["acc1"])  # acc1 serves again
    stand.clock.advance(15 * 60.0)
    assert stand.render(api, "tpl_back") == ChartSuccess(PNG, "acc1")  # the probe, answered 200
    (back,) = stand.logs.events("chart-img key serves again: its probe answered 200")
    assert back["accountId"] == "acc1" and stand.row("acc1").state is not AccountState.COOLING
    assert stand.doc("acc1")["coolUntil"] is None


def test_every_key_hearing_too_many_requests_for_over_a_minute_sets_none_aside(stand: Stand) -> None:
    """CHART-IMG throttling the whole service (every key hears 429 at once) for over a minute
    under steady traffic (a 2-chart step every few seconds): the keys back off, none is set
    aside or exhausted, and the next step right after renders on those keys."""
    api = stand.instance("acc1", "acc2")
    stand.server.throttle()
    started = stand.clock.now()
    while stand.clock.now() - started < timedelta(seconds=75):
        stand.step(api, "tpl_a", "tpl_b")
        stand.clock.advance(3.0)
    throttled = [r for r in stand.server.requests if r.status == 429]
    assert {r.account_id for r in throttled} == {"acc1", "acc2"} and len(throttled) == len(
        stand.server.requests
    )
    stand.server.end_throttle()

    after = stand.step(api, "tpl_c", "tpl_d")  # right after: within the keys' last cooldown
    assert all(isinstance(r, ChartSuccess) for r in after), after
    assert len([r for r in stand.server.requests if r.status == 200]) == 2
    assert stand.logs.events(STREAK_ERROR) == [] and usable(api, "acc1", "acc2")
    assert any(e["chartImgThrottling"] for e in stand.logs.events(COOLING))
    for account_id in ("acc1", "acc2"):
        assert not {"coolUntil", "exhaustedUntil", "disabled"} & set(stand.doc(account_id))


# --- 401: moved at once, disabled when refused again ---------------------------------------


def test_one_401_moves_the_call_and_the_key_stays_usable(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], fail_times=1, fail_status=401)  # "Invalid Request"
    assert stand.render(api) == ChartSuccess(PNG, "acc2")
    assert stand.answers() == [("acc1", 401, "Invalid Request"), ("acc2", 200, None)]
    assert not any(stand.clock.sleeps) and usable(api, "acc1", "acc2")
    assert "disabled" not in stand.doc("acc1") and stand.logs.events(DISABLED_ERROR) == []
    assert stand.render(api, "tpl_b") == ChartSuccess(PNG, "acc1")  # the same key, at once


def test_401s_for_two_requests_disable_the_key_for_every_instance_until_a_probe(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], status=401)
    assert [stand.render(api, f"tpl_{i}") for i in range(3)] == [ChartSuccess(PNG, "acc2")] * 3
    # the second refusal, then the known-good chart on acc1, refused too: the key's fault
    assert [a for a, _, _ in stand.answers()] == ["acc1", "acc2", "acc1", "acc2", "acc1", "acc2"]
    assert stand.server.requests[4].symbol == "BINANCE:BTCUSDT"
    assert api.limiter.usable_accounts() == ("acc2",)
    (event,) = stand.logs.events(DISABLED_ERROR)
    assert (event["severity"], event["accountId"]) == ("ERROR", "acc1")
    assert event["rule"] == "key refused for two requests, then for a known-good chart"
    assert event["answers"] == [{"httpStatus": 401, "message": "Invalid Request"}] * 2
    row = stand.row("acc1")
    assert (row.state, row.disabled_reason) == (
        AccountState.DISABLED,
        'CHART-IMG refused the key 401 "Invalid Request", then 401 "Invalid Request"',
    )
    assert row.disabled_until == stand.clock.now() + timedelta(minutes=15)  # then one probe
    other = stand.instance("acc1", "acc2")  # another instance: its reservation on acc1 is refused
    assert stand.render(other, "tpl_x") == ChartSuccess(PNG, "acc2")
    assert stand.server.count("acc1") == 3 and other.limiter.usable_accounts() == ("acc2",)
    stand.server.script(key=stand.keys["acc1"])  # the key was rotated: it serves again
    stand.clock.advance(15 * 60.0)
    assert stand.render(other, "tpl_probe") == ChartSuccess(PNG, "acc1")  # the probe decides
    assert stand.doc("acc1")["disabled"] is False and stand.row("acc1").state is not AccountState.DISABLED


def test_a_request_that_draws_401_on_the_only_key_fails_alone_and_the_next_chart_renders(
    stand: Stand,
) -> None:
    """Issue 26: one template's request is refused 401 on the only key: that chart's own
    final failure (one call), the key stays in service, the next chart on it renders."""
    api = stand.instance("acc1")
    stand.server.refuse_request(symbol="BINANCE:TPL_BAD")
    bad, good = stand.step(api, "tpl_bad", "tpl_good")
    assert isinstance(bad, ChartFailure) and bad.error.details["errorKind"] == "request_refused"
    assert good == ChartSuccess(PNG, "acc1")
    assert stand.answers() == [("acc1", 401, "Invalid Request"), ("acc1", 200, None)]
    again, other = stand.step(api, "tpl_bad", "tpl_other")  # the same request in the next step
    assert isinstance(again, ChartFailure) and other == ChartSuccess(PNG, "acc1")
    assert stand.logs.events(DISABLED_ERROR) == [] and usable(api, "acc1")
    assert "disabled" not in stand.doc("acc1")


def test_two_requests_that_draw_401_on_the_only_key_leave_it_in_service(stand: Stand) -> None:
    """Issue 38: CHART-IMG answers 401 "Invalid Request" (its documented example) for two
    different requests on the only key. Before, the key was disabled for 15 minutes and the
    next valid chart failed ("refused the key of every configured account"); now the key is
    asked for the known-good chart first, which renders: it stays in service."""
    api = stand.instance("acc1")
    stand.server.refuse_request(symbol="BINANCE:TPL_BAD1")
    stand.server.refuse_request(symbol="BINANCE:TPL_BAD2")
    for template in ("tpl_bad1", "tpl_bad2"):
        refused = stand.render(api, template)
        assert isinstance(refused, ChartFailure) and refused.error.details["errorKind"] == "request_refused"
    assert stand.render(api, "tpl_good") == ChartSuccess(PNG, "acc1")
    assert stand.answers() == [
        ("acc1", 401, "Invalid Request"),
        ("acc1", 401, "Invalid Request"),
        ("acc1", 200, None),  # the known-good chart
        ("acc1", 200, None),
    ]
    assert [r.symbol for r in stand.server.requests] == [
        "BINANCE:TPL_BAD1",
        "BINANCE:TPL_BAD2",
        "BINANCE:BTCUSDT",
        "BINANCE:TPL_GOOD",
    ]
    assert stand.logs.events(DISABLED_ERROR) == [] and usable(api, "acc1")
    assert "disabled" not in stand.doc("acc1")


def test_a_request_refused_on_every_key_disables_none(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.refuse_request(symbol="BINANCE:TPL_BAD")
    for _ in range(3):  # in three steps: the same request every time
        (bad,) = stand.step(api, "tpl_bad")
        assert isinstance(bad, ChartFailure) and bad.error.details["refusedBy"] == ["acc1", "acc2"]
    assert len(stand.server.requests) == 6  # each key once per step, never a third attempt
    assert stand.logs.events(DISABLED_ERROR) == [] and usable(api, "acc1", "acc2")
    assert stand.step(api, "tpl_good") == [ChartSuccess(PNG, "acc1")]


def test_requests_each_refused_by_several_keys_disable_none_and_every_key_serves_on(stand: Stand) -> None:
    """Issue 27: a template CHART-IMG refuses, asked for with a symbol per run, is a
    different request each time: counted against the keys as they refused it, it disabled
    every key of a healthy fleet in turn (3 to 5 of 10 in each chaos run, 3 attempts per
    chart). A request refused by more than one key, while keys it did not try remain, is the
    request's: no key is blamed, the charts beside it render."""
    keys = ("acc1", "acc2", "acc3", "acc4")
    api = stand.instance(*keys, attempts=3)  # three of the four keys tried: one left untried
    for n in (1, 2, 3):
        stand.server.refuse_request(symbol=f"BINANCE:BAD{n}")
    for n in (1, 2, 3):
        bad, good = stand.step(api, f"bad{n}", f"good{n}")
        assert isinstance(bad, ChartFailure) and bad.error.details["attempts"] == 3
        assert len(set(bad.error.details["accountIds"])) == 3  # three keys tried, one left
        assert isinstance(good, ChartSuccess)
    assert stand.logs.events(DISABLED_ERROR) == [] and usable(api, *keys)
    assert not any("disabled" in stand.doc(a) for a in keys)
    blamed = stand.logs.events("chart-img request refused by more than one key: the request's, no key blamed")
    assert len(blamed) == 3 and all(len(e["refusedBy"]) == 3 for e in blamed)


# --- no unknown answer retires a key on first sight -----------------------------------------

UNKNOWN_ANSWERS: Sequence[tuple[int, str | None]] = [
    (429, "Quota Gone"),
    (429, None),  # no body at all
    (429, "Daily quota reached, come back tomorrow"),  # not a documented wording
    (401, "Unauthorized"),
    (403, "Access Denied"),
    (400, "Bad Request"),
    (402, "Payment Required"),
    (404, "Not Found"),
    (405, "Method Not Allowed"),
    (408, "Request Timeout"),
    (410, "Gone"),
    (413, "Payload Too Large"),
    (418, "I'm a teapot"),
    (451, "Unavailable For Legal Reasons"),
    (499, "Client Closed Request"),
    (502, "Bad Gateway"),
]


@pytest.mark.parametrize(("status", "message"), UNKNOWN_ANSWERS, ids=[f"{s}-{m}" for s, m in UNKNOWN_ANSWERS])
def test_an_unknown_answer_leaves_the_key_usable(stand: Stand, status: int, message: str | None) -> None:
    api = stand.instance("acc1")
    wording = {"empty_body": True} if message is None else {"fail_message": message}
    stand.server.script(
        key=stand.keys["acc1"], fail_times=1, fail_status=status, undocumented=True, **wording
    )
    stand.render(api)  # whatever became of this chart (moved, retried or failed)
    assert stand.answers()[0][:2] == ("acc1", status)
    assert usable(api, "acc1")
    doc = stand.doc("acc1")
    assert not {"exhaustedUntil", "disabled"} & set(doc) and doc["usageToday"] < 44
    stand.clock.advance(30.0)  # past any first cooldown
    assert stand.render(api, "tpl_b") == ChartSuccess(PNG, "acc1")
