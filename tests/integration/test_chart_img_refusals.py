"""429s and 401s against the CHART-IMG stand-in (tests/harness/chart_img_server.py), with the
real HTTP client on real sockets: which answers cool a key, exhaust it for the day, or
disable it, and that no answer we cannot name retires a key on first sight.

The worker's clock is a FakeClock: cooldowns, Retry-After and the "over a minute" of the
429 streak pass without waiting. The usage store is run-local's file: what is persisted is
read back as a second instance and `worker-chart-export accounts` would read it
(core.account_status).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
from worker_chart_export.adapters.chart_img import Seams
from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.account_status import AccountState, account_row
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.retry_policy import RetryPolicy
from worker_chart_export.core.types import ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.settings import Settings

MIDNIGHT = "2025-01-16T00:00:00.000Z"  # after the FakeClock's 2025-01-15 12:00 UTC
STREAK_ERROR = "chart-img key keeps answering 429: exhausted for the day"
DISABLED_ERROR = "chart-img account key refused: account disabled"


@dataclass
class Stand:
    server: ChartImgServer
    clock: FakeClock
    store: FileUsageStore
    logs: LogCapture
    keys: dict[str, str] = field(default_factory=dict)
    apis: list[Any] = field(default_factory=list)
    results: list[ChartResult] = field(default_factory=list)

    def instance(self, *account_ids: str) -> Any:
        """A worker instance (its own limiter) on the shared usage file and the fake clock."""
        for account_id in account_ids:
            self.keys.setdefault(account_id, self.server.add_account(account_id))
        config = [{"id": a, "apiKey": self.keys[a]} for a in account_ids]
        settings = Settings(
            charts_api_mode="real",
            chart_img_base_url=self.server.base_url,
            chart_img_accounts_json=SecretStr(json.dumps(config)),
            chart_img_request_timeout_seconds=5.0,
            chart_img_rate_per_second=50.0,
            chart_img_burst=20,
            charts_fixtures_dir=Path("/nonexistent"),
        )
        policy = RetryPolicy(initial_backoff=0.5, max_backoff=4.0, jitter=0.0)
        api = build_chart_api(settings, self.store, retry_policy=policy, seams=Seams(clock=self.clock))
        self.apis.append(api)
        return api

    def render(self, api: Any, template: str = "tpl_a") -> ChartResult:
        """One chart as a step of its own, within a 60 s budget on the fake clock."""
        with api.for_step([], Budget.starting_now(60.0, self.clock)) as step:
            result: ChartResult = step.render(chart_call(template))
        self.results.append(result)
        return result

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
    assert not any(stand.clock.sleeps)  # another key at once
    assert usable(api, "acc1", "acc2")
    row = stand.row("acc1")  # what `accounts` shows: neither exhausted nor disabled
    assert (row.exhausted_until, row.disabled, row.used_today) == (None, False, 1)
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
    assert (doc["usageToday"], doc["exhaustedUntil"]) == (44, MIDNIGHT)
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


def test_a_key_answering_429_for_over_a_minute_is_exhausted_with_one_error(stand: Stand) -> None:
    api = stand.instance("acc1")
    stand.server.script(key=stand.keys["acc1"], status=429)  # "Too Many Requests", for ever
    results = [stand.render(api, f"tpl_{i}") for i in range(4)]
    assert all(isinstance(r, ChartFailure) for r in results)
    # 429s at 0, 1, 3, 7, 15, 31 and 61 s (the escalating cooldowns): the 7th crosses the minute
    assert stand.answers() == [("acc1", 429, "Too Many Requests")] * 7
    assert stand.clock.elapsed == pytest.approx(61.0, abs=0.5)
    (event,) = stand.logs.events(STREAK_ERROR)
    assert (event["severity"], event["accountId"], event["cooldowns"], event["answered429"]) == (
        "ERROR",
        "acc1",
        7,
        7,
    )
    assert event["answers"] == [{"httpStatus": 429, "message": "Too Many Requests", "times": 7}]
    assert (event["usedToday"], event["dailyLimit"]) == (7, 44)  # our count said it had quota
    row = stand.row("acc1")
    assert (row.state, row.exhausted_until.isoformat()) == (
        AccountState.EXHAUSTED,
        "2025-01-16T00:00:00+00:00",
    )
    assert row.exhausted_reason.startswith(
        "CHART-IMG answered 429 through 7 cooldowns over 61 s with 7 of 44"
    )
    failed = results[-1]
    assert isinstance(failed, ChartFailure) and failed.error.code.value == "CHART_API_LIMIT_EXCEEDED"
    assert failed.error.details["exhaustedAccounts"] == ["acc1"]  # the 4th chart: no call at all


def test_429s_on_one_key_while_another_serves_are_judged_per_key(stand: Stand) -> None:
    """The other key's successes do not end acc1's streak; acc1's 429s do not touch acc2."""
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], status=429, empty_body=True)
    for i in range(12):
        assert stand.render(api, f"tpl_{i}") == ChartSuccess(PNG, "acc2")
        stand.clock.advance(10.0)
    assert api.limiter.exhausted_accounts() == ("acc1",) and usable(api, "acc2")
    (event,) = stand.logs.events(STREAK_ERROR)
    assert event["answers"] == [{"httpStatus": 429, "message": "", "times": event["answered429"]}]
    assert event["spanSeconds"] > 60 and event["cooldowns"] >= 5


# --- 401: moved at once, disabled when refused again ---------------------------------------


def test_one_401_moves_the_call_and_the_key_stays_usable(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], fail_times=1, fail_status=401)  # "Invalid Request"
    assert stand.render(api) == ChartSuccess(PNG, "acc2")
    assert stand.answers() == [("acc1", 401, "Invalid Request"), ("acc2", 200, None)]
    assert not any(stand.clock.sleeps) and usable(api, "acc1", "acc2")
    assert "disabled" not in stand.doc("acc1") and stand.logs.events(DISABLED_ERROR) == []
    assert stand.render(api, "tpl_b") == ChartSuccess(PNG, "acc1")  # the same key, at once


def test_two_401s_disable_the_key_for_every_instance(stand: Stand) -> None:
    api = stand.instance("acc1", "acc2")
    stand.server.script(key=stand.keys["acc1"], status=401)
    assert [stand.render(api, f"tpl_{i}") for i in range(3)] == [ChartSuccess(PNG, "acc2")] * 3
    assert [a for a, _, _ in stand.answers()] == ["acc1", "acc2", "acc1", "acc2", "acc2"]
    assert api.limiter.usable_accounts() == ("acc2",)
    (event,) = stand.logs.events(DISABLED_ERROR)
    assert (event["severity"], event["accountId"]) == ("ERROR", "acc1")
    assert event["answers"] == [{"httpStatus": 401, "message": "Invalid Request"}] * 2
    row = stand.row("acc1")
    assert (row.state, row.disabled_reason) == (
        AccountState.DISABLED,
        'CHART-IMG refused the key 401 "Invalid Request", then 401 "Invalid Request"',
    )
    other = stand.instance("acc1", "acc2")  # another instance: its reservation on acc1 is refused
    assert stand.render(other, "tpl_x") == ChartSuccess(PNG, "acc2")
    assert stand.server.count("acc1") == 2 and other.limiter.usable_accounts() == ("acc2",)


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
