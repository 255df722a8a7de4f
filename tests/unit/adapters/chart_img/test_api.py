"""RealChartApi (adapters/chart_img/api.py): the attempts of one chart across accounts,
classified, retried and bounded by the step's budget, over the scripted transport and a
FakeClock (scripted.py); and build_chart_api's choice of adapter.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.chart_img_server import PNG, FakeClock, chart_call
from unit.adapters.chart_img.scripted import KEYS, Rig, answer, failure, png
from worker_chart_export.adapters.chart_img.accounts_config import NO_ACCOUNTS_MESSAGE
from worker_chart_export.adapters.chart_img.assembly import RealChartApi, Seams
from worker_chart_export.adapters.fixtures import MockChartApi
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.documents import ChartRequestInput
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.exceptions import ConfigError, TransientStoreError
from worker_chart_export.core.step.manifest import ManifestFailure, ManifestHeader, build_manifest
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartSuccess
from worker_chart_export.settings import Settings
from worker_chart_export.testing import InMemoryUsageStore

# --- the happy path ------------------------------------------------------------------------


def test_logs_the_call_without_the_key(rig: Callable[..., Rig]) -> None:
    r = rig([png()])
    r.render(template="tpl_a", run_id="run-9", step_id="charts")
    (started,) = r.logs.events("chart api attempt started")
    (done,) = r.logs.events("chartsApi.request")
    assert started["accountId"] == "acc1" and started["attempt"] == 1
    expected = {
        "accountId": "acc1",
        "runId": "run-9",
        "stepId": "charts",
        "symbol": "BINANCE:BTCUSDT",
        "interval": "1h",
        "chartTemplateId": "tpl_a",
        "status": "succeeded",
        "httpStatus": 200,
        "errorCode": None,
        "attempt": 1,
        "chartsApi": {"mode": "real", "accountId": "acc1", "endpoint": "advanced-chart"},
        "service": "worker-chart-export",
        "env": "test",
        "severity": "INFO",
    }
    assert expected.items() <= done.items()
    assert isinstance(done["durationMs"], int)
    assert "x-api-key" not in r.logs.text.lower()
    assert started["timeoutSeconds"] == 10.0  # CHART_IMG_REQUEST_TIMEOUT_SECONDS, within the budget


def test_each_attempt_says_its_timeout_duration_status_and_chart_img_words(rig: Callable[..., Rig]) -> None:
    html = httpx.Response(200, content=b"<html>oops</html>", headers={"content-type": "text/html"})
    r = rig(
        [answer(500, "Something Went Wrong"), html],
        accounts=("acc1", "acc2"),
        latency=1.25,
        chart_img_max_attempts=2,
    )
    error = failure(r.render(budget_seconds=7.12345))
    assert error["details"]["bytes"] == len(b"<html>oops</html>")
    started = [line["timeoutSeconds"] for line in r.logs.events("chart api attempt started")]
    assert started == [7.123, pytest.approx(7.12345 - 1.25 - 0.75, abs=0.001)]  # what the budget left
    first, second = r.logs.events("chartsApi.request")
    said = ("status", "httpStatus", "errorCode", "errorKind", "apiMessage")
    assert {k: first[k] for k in (*said, "durationMs")} == {
        "status": "failed",
        "httpStatus": 500,
        "errorCode": "CHART_API_FAILED",
        "errorKind": "http",
        "apiMessage": "Something Went Wrong",
        "durationMs": 1250,
    }
    assert {k: second[k] for k in (*said, "severity")} == {
        "status": "failed",
        "httpStatus": 200,
        "errorCode": "CHART_API_FAILED",
        "errorKind": "not_png",
        "apiMessage": None,
        "severity": "WARNING",
    }


# --- classification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid Request"),
        (403, "Layout Forbidden"),
        (404, "Not Found"),
        (409, "Session Disconnected"),
        (422, "Invalid Symbol"),
    ],
)
def test_final_statuses_are_not_retried(rig: Callable[..., Rig], status: int, message: str) -> None:
    r = rig([answer(status, message), png()], accounts=("acc1", "acc2"))
    error = failure(r.render())
    assert error["code"] == "CHART_API_FAILED"
    assert error["details"]["httpStatus"] == status
    assert error["details"]["message"] == message
    assert error["details"]["attempts"] == 1
    assert len(r.transport.seen) == 1
    assert r.clock.sleeps == []


NOT_WHOLE = {
    "html": (b"<html>oops</html>", "text/html"),
    "bare-signature": (PNG[:8], "image/png"),
    "first-half": (PNG[: len(PNG) // 2], "image/png"),
    "trailing-bytes": (PNG + b"garbage", "image/png"),
}


@pytest.mark.parametrize(("body", "content_type"), NOT_WHOLE.values(), ids=NOT_WHOLE.keys())
def test_a_200_that_is_no_whole_png_is_tried_again(
    rig: Callable[..., Rig], body: bytes, content_type: str
) -> None:
    """A body cut short or an HTML page behind a 200 is a bad moment, not a chart: never
    delivered, tried again after a backoff (it ended the chart at once before)."""
    broken = httpx.Response(200, content=body, headers={"content-type": content_type})
    r = rig([broken, png()])
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert len(r.transport.seen) == 2 and r.clock.sleeps == [pytest.approx(0.75)]
    first, _ = r.logs.events("chartsApi.request")
    assert (first["httpStatus"], first["errorKind"]) == (200, "not_png")


def test_a_200_that_is_never_a_whole_png_fails_as_a_bad_moment(rig: Callable[..., Rig]) -> None:
    broken = httpx.Response(200, content=PNG[:8], headers={"content-type": "image/png"})
    r = rig([broken])
    result = r.render()
    assert isinstance(result, ChartFailure) and result.error.retryable  # the step may wait for it
    error = failure(result)
    assert error["message"] == (
        "CHART-IMG answered HTTP 200 but the body is not a whole PNG image: "
        "it holds the PNG signature and nothing else"
    )
    assert (error["details"]["contentType"], error["details"]["bytes"], error["details"]["attempts"]) == (
        "image/png",
        8,
        5,
    )


def test_a_whole_png_of_another_size_is_delivered_with_one_warning(rig: Callable[..., Rig]) -> None:
    """CHART-IMG's docs do not promise the exact size: the chart is delivered, the difference
    said. The stand-in's PNG is 4 x 3; the call asks for CHART-IMG's defaults (800 x 600)."""
    r = rig([png()])
    assert r.render() == ChartSuccess(PNG, "acc1")
    (warning,) = r.logs.events("chart size differs from the size asked")
    assert {k: warning[k] for k in ("askedWidth", "askedHeight", "width", "height", "severity")} == {
        "askedWidth": 800,
        "askedHeight": 600,
        "width": 4,
        "height": 3,
        "severity": "WARNING",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": "Layout Forbidden"}, "Layout Forbidden"),
        ({"errors": [{"msg": "Invalid Interval"}, "bad width"]}, "Invalid Interval; bad width"),
    ],
)
def test_error_bodies_in_every_shape(rig: Callable[..., Rig], body: dict, message: str) -> None:
    r = rig([httpx.Response(422, json=body)])
    assert failure(r.render())["details"]["message"] == message


def test_a_422_array_keeps_each_param_and_msg(rig: Callable[..., Rig]) -> None:
    body = [
        {
            "value": "X",
            "msg": "must be a valid tradingview EXCHANGE:SYMBOL",
            "param": "symbol",
            "location": "body",
        },
        {"value": "7h", "msg": "must be a supported interval", "param": "interval", "location": "body"},
    ]
    error = failure(rig([httpx.Response(422, json=body)]).render())
    assert error["code"] == "CHART_API_FAILED"
    assert error["details"]["errors"] == [
        {"param": "symbol", "msg": "must be a valid tradingview EXCHANGE:SYMBOL"},
        {"param": "interval", "msg": "must be a supported interval"},
    ]
    assert "symbol: must be a valid tradingview EXCHANGE:SYMBOL" in error["message"]


@pytest.mark.parametrize(
    "message", ["Exceed Max Usage Resolution Limit (800x600)", "Exceed Max Usage Parameter Limit (3)"]
)
def test_a_plan_limit_403_is_final_and_names_the_template(rig: Callable[..., Rig], message: str) -> None:
    r = rig([answer(403, message), png()], accounts=("acc1", "acc2"))
    error = failure(r.render(template="big_chart_v1"))
    assert error["code"] == "CHART_API_FAILED" and error["details"]["errorKind"] == "plan_limit"
    assert "big_chart_v1" in error["message"] and message in error["message"]
    assert len(r.transport.seen) == 1  # another key would refuse it the same way
    assert r.api.limiter.usable_accounts() == ("acc1", "acc2")


@pytest.mark.parametrize(("status", "message"), [(403, "Forbidden"), (401, "Invalid Request")])
def test_a_refused_key_moves_the_call_and_is_disabled_when_refused_for_another_request(
    rig: Callable[..., Rig], status: int, message: str
) -> None:
    refused = answer(status, message)
    # acc1 refuses AAA, acc2 renders it; acc1 refuses BBB, acc2 renders it, and acc1 refuses
    # the known-good chart asked once BBB ended
    r = rig([refused, png(), refused, png(), refused, png()], accounts=("acc1", "acc2"))
    assert r.render(symbol="BINANCE:AAAUSDT") == ChartSuccess(PNG, "acc2")
    assert not any(r.clock.sleeps)
    assert r.api.limiter.usable_accounts() == ("acc1", "acc2")  # refused once: still usable
    (warning,) = r.logs.events("chart-img key refused once: the call moves to another account")
    assert warning["accountId"] == "acc1" and warning["severity"] == "WARNING"
    # acc1 (least used again) refused a second time, for another request, and refused for
    # the known-good chart too: disabled
    assert r.render(symbol="BINANCE:BBBUSDT") == ChartSuccess(PNG, "acc2")
    assert r.api.limiter.usable_accounts() == ("acc2",)
    assert r.store.snapshot()["acc1"]["disabled"] is True
    r.render(symbol="BINANCE:CCCUSDT")
    assert r.transport.accounts == ["acc1", "acc2", "acc1", "acc2", "acc1", "acc2"]  # acc1 not again
    assert json.loads(r.transport.seen[4].content)["symbol"] == "BINANCE:BTCUSDT"  # the known-good chart
    (event,) = r.logs.events("chart-img account key refused: account disabled")
    assert event["severity"] == "ERROR" and event["accountId"] == "acc1"
    assert event["rule"] == "key refused for two requests, then for a known-good chart"


def test_one_request_refused_twice_on_a_key_counts_once(rig: Callable[..., Rig]) -> None:
    """The same body in two steps (or a chart's retry) is one request: the request may be
    what CHART-IMG refuses, so it never disables the key on its own."""
    r = rig([answer(401, "Invalid Request"), png()] * 3, accounts=("acc1", "acc2"))
    for _ in range(3):
        assert r.render(symbol="BINANCE:SAMEUSDT") == ChartSuccess(PNG, "acc2")
    assert r.transport.accounts == ["acc1", "acc2"] * 3
    assert r.api.limiter.usable_accounts() == ("acc1", "acc2")
    assert r.logs.events("chart-img account key refused: account disabled") == []


def test_a_request_refused_on_the_only_key_is_its_own_final_failure(rig: Callable[..., Rig]) -> None:
    """Issue 26: a template CHART-IMG answers 401 on the only key fails alone; the next
    chart on that key is rendered."""
    refused = answer(401, "Invalid Request")
    r = rig([refused, png(), refused, png()])
    error = failure(r.render(symbol="BINANCE:BADUSDT"))
    assert (error["code"], error["details"]["errorKind"], error["details"]["refusedBy"]) == (
        "CHART_API_FAILED",
        "request_refused",
        ["acc1"],
    )
    assert error["message"].startswith("CHART-IMG refused this request on every account it could go to")
    assert len(r.transport.seen) == 1  # not retried: every key refused it
    (said,) = r.logs.events("chart-img request refused by every key: its final failure, no key set aside")
    assert said["refusedBy"] == ["acc1"]
    assert r.render(symbol="BINANCE:GOODUSDT") == ChartSuccess(PNG, "acc1")  # the key is fine
    assert failure(r.render(symbol="BINANCE:OTHERUSDT"))["details"]["errorKind"] == "request_refused"
    assert r.api.limiter.usable_accounts() == ("acc1",)  # the success between: never disabled
    assert r.logs.events("chart-img account key refused: account disabled") == []


def test_the_only_key_refused_for_a_second_request_is_disabled_at_once(rig: Callable[..., Rig]) -> None:
    """On the only key, the second request refused with no success between disables it then
    and there: the failure says the key is out of service, not that the request was refused."""
    r = rig([answer(401, "Invalid Request")])  # the known-good chart refused too: the key
    assert failure(r.render(symbol="BINANCE:AAAUSDT"))["details"]["errorKind"] == "request_refused"
    error = failure(r.render(symbol="BINANCE:BBBUSDT"))
    assert error["details"]["disabledAccounts"] == ["acc1"] and "refusedBy" not in error["details"]
    assert r.api.limiter.usable_accounts() == () and len(r.transport.seen) == 3
    (disabled,) = r.logs.events("chart-img account key refused: account disabled")
    assert disabled["rule"] == "key refused for two requests, then for a known-good chart"


def test_the_only_key_refused_for_two_bad_requests_keeps_rendering_good_ones(rig: Callable[..., Rig]) -> None:
    """Issue 38: CHART-IMG answers 401 "Invalid Request" (its documented example) for two
    different symbols on the only key. Before, the key was disabled for 15 minutes and the
    next valid chart failed; the known-good chart now shows the key works."""
    refused = answer(401, "Invalid Request")
    r = rig([refused, refused, png(), png()])  # AAA, BBB, the known-good chart, then CCC
    assert failure(r.render(symbol="BINANCE:AAAUSDT"))["details"]["errorKind"] == "request_refused"
    assert failure(r.render(symbol="BINANCE:BBBUSDT"))["details"]["errorKind"] == "request_refused"
    assert r.api.limiter.usable_accounts() == ("acc1",) and "disabled" not in r.store.snapshot()["acc1"]
    assert r.render(symbol="BINANCE:CCCUSDT") == ChartSuccess(PNG, "acc1")
    symbols = [json.loads(request.content)["symbol"] for request in r.transport.seen]
    assert symbols == ["BINANCE:AAAUSDT", "BINANCE:BBBUSDT", "BINANCE:BTCUSDT", "BINANCE:CCCUSDT"]
    (kept,) = r.logs.events("chart-img key refused for two requests but not for a known-good chart: kept")
    assert (kept["accountId"], kept["knownGoodChart"], kept["severity"]) == ("acc1", "rendered", "WARNING")
    assert r.logs.events("chart-img account key refused: account disabled") == []


def test_a_key_whose_known_good_chart_gets_no_verdict_is_kept(rig: Callable[..., Rig]) -> None:
    """A 5xx to the known-good chart says nothing of the key: it stays in service."""
    refused = answer(401, "Invalid Request")
    r = rig([refused, refused, answer(503, "Service Unavailable"), png()])
    failure(r.render(symbol="BINANCE:AAAUSDT"))
    failure(r.render(symbol="BINANCE:BBBUSDT"))
    assert r.api.limiter.usable_accounts() == ("acc1",)
    (kept,) = r.logs.events("chart-img key refused for two requests but not for a known-good chart: kept")
    assert kept["knownGoodChart"] == "no verdict"


def test_keys_refused_for_every_request_are_disabled(rig: Callable[..., Rig]) -> None:
    """Refused by every key that could serve it, a request leaves no key to tell it from
    revoked keys: each refusal counts (judged once the request ends), as it always did."""
    r = rig([answer(403, "Forbidden")], accounts=("acc1", "acc2"))
    error = failure(r.render(symbol="BINANCE:AAAUSDT"))  # acc1, acc2: this request, final
    assert error["details"]["errorKind"] == "request_refused" and len(r.transport.seen) == 2
    assert r.api.limiter.usable_accounts() == ("acc1", "acc2")
    # another request, and the known-good chart on each key: both keys disabled
    error = failure(r.render(symbol="BINANCE:BBBUSDT"))
    assert error["details"]["errorKind"] == "request_refused" and len(r.transport.seen) == 6
    assert r.api.limiter.usable_accounts() == ()
    again = failure(r.render(symbol="BINANCE:CCCUSDT"))  # no call at all
    assert again["details"]["disabledAccounts"] == ["acc1", "acc2"] and len(r.transport.seen) == 6


# --- retries -------------------------------------------------------------------------------


def test_5xx_forever_makes_exactly_five_attempts_with_backoff(rig: Callable[..., Rig]) -> None:
    r = rig([answer(500, "Something Went Wrong")])
    result = r.render()
    assert isinstance(result, ChartFailure) and result.error.retryable
    error = failure(result)
    assert len(r.transport.seen) == 5
    assert error["code"] == "CHART_API_FAILED"
    assert error["details"]["httpStatus"] == 500
    assert error["details"]["message"] == "Something Went Wrong"
    assert error["details"]["attempts"] == 5
    # the rig's backoff: 0.5 s doubling, plus 0.5 x 0.5 of jitter, at most 4 s
    assert r.clock.sleeps == pytest.approx([0.75, 1.25, 2.25, 4.0])
    assert r.store.snapshot()["acc1"]["usageToday"] == 5  # every attempt took a unit


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (408, {"message": "Request Timeout"}),
        (425, {"message": "Too Early"}),
        (520, "<html>Web server is returning an unknown error</html>"),
        (522, "<html>Connection timed out</html>"),
        (524, "<html>A timeout occurred</html>"),
        (529, None),
    ],
)
def test_timeouts_and_the_cdns_answers_are_tried_again(
    rig: Callable[..., Rig], status: int, body: Any
) -> None:
    """Each ended the chart after one attempt before; the next answer is a chart."""
    refusal = (
        httpx.Response(status, json=body)
        if isinstance(body, dict)
        else httpx.Response(status, text=body or "")
    )
    r = rig([refusal, png()])
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert len(r.transport.seen) == 2 and r.clock.sleeps == [pytest.approx(0.75)]


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_transient_then_success(rig: Callable[..., Rig], status: int) -> None:
    r = rig([answer(status, "External Request Timeout"), png()])
    assert isinstance(r.render(), ChartSuccess)
    assert len(r.transport.seen) == 2


def test_max_attempts_comes_from_settings(rig: Callable[..., Rig]) -> None:
    r = rig([answer(503, "busy")], chart_img_max_attempts=2)
    assert failure(r.render())["details"]["attempts"] == 2
    assert len(r.transport.seen) == 2


def test_the_pacing_comes_from_the_rate_and_burst_settings(rig: Callable[..., Rig]) -> None:
    """By hand: 2.5/s paced at 0.9 (docs/usage.md) is one call every 0.444 s; a burst of 6 banks
    5 x 0.444 s less the 0.3 s kept for late arrivals = 1.922 s. So eight calls in a row: five
    at once, the sixth 0.3 s later, then one every 0.444 s (the default 1/s, burst 3 would
    wait after the second, then 1.111 s each)."""
    r = rig([png()], chart_img_rate_per_second=2.5, chart_img_burst=6)
    with r.session() as session:
        results = [r.render(session=session, template=f"tpl_{i}") for i in range(8)]
    assert all(isinstance(result, ChartSuccess) for result in results)
    assert r.clock.sleeps == pytest.approx([0.3, 0.444, 0.444], abs=1e-3)


def test_retries_prefer_an_untried_account(rig: Callable[..., Rig]) -> None:
    r = rig([answer(500, "Something Went Wrong"), png()], accounts=("acc1", "acc2"))
    result = r.render()
    assert result == ChartSuccess(PNG, "acc2")
    assert r.transport.accounts == ["acc1", "acc2"]


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ReadTimeout("timed out"), "timeout"),
        (httpx.ConnectTimeout("timed out"), "timeout"),
        (httpx.ConnectError("[Errno 111] Connection refused"), "connection"),
        (httpx.RemoteProtocolError("peer closed"), "connection"),
    ],
)
def test_transport_errors_are_retried_then_fail(rig: Callable[..., Rig], exc: Exception, kind: str) -> None:
    r = rig([exc])
    error = failure(r.render())
    assert error["code"] == "CHART_API_FAILED"
    assert error["details"]["errorKind"] == kind
    assert error["details"]["exception"] == type(exc).__name__
    assert error["details"]["attempts"] == 5
    assert len(r.transport.seen) == 5
    assert all(e["httpStatus"] is None for e in r.logs.events("chartsApi.request"))


def test_timeouts_never_exceed_the_budget(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.ReadTimeout("slow")], latency=30.0, chart_img_request_timeout_seconds=4.0)
    error = failure(r.render(budget_seconds=7.0))
    timeouts = [req.extensions["timeout"] for req in r.transport.seen]
    assert timeouts[0] == {"connect": 4.0, "read": 4.0, "write": 4.0, "pool": 4.0}
    assert timeouts[1]["read"] == pytest.approx(7.0 - 4.0 - 0.75)  # only what was left
    assert len(r.transport.seen) == 2  # a third would start with no time left
    assert r.clock.elapsed == pytest.approx(7.0)
    assert error["details"]["errorKind"] == "timeout"


def test_a_wait_is_cut_so_the_last_attempt_comes_at_the_budgets_end(rig: Callable[..., Rig]) -> None:
    """1 s call; the 0.75 s backoff would leave 0.75 s, less than an attempt's minimum (1 s):
    the wait is cut to 0.5 s, and the second attempt has the last second of the budget."""
    r = rig([answer(500, "Something Went Wrong")], latency=1.0)
    error = failure(r.render(budget_seconds=2.5))
    assert len(r.transport.seen) == 2
    assert r.clock.sleeps == [pytest.approx(0.5)]
    assert r.transport.seen[1].extensions["timeout"]["read"] == pytest.approx(1.0)
    assert error["details"]["httpStatus"] == 500 and r.clock.elapsed == pytest.approx(2.5)


def test_expired_budget_makes_no_call(rig: Callable[..., Rig]) -> None:
    r = rig([png()])
    error = failure(r.render(budget_seconds=0.0))
    assert error["code"] == "CHART_API_FAILED"
    assert error["details"]["errorKind"] == "budget"
    assert r.transport.seen == []
    assert r.store.snapshot() == {}


def test_request_timeout_setting_caps_each_attempt(rig: Callable[..., Rig]) -> None:
    r = rig([png()], chart_img_request_timeout_seconds=2.5)
    r.render(budget_seconds=100)
    assert r.transport.seen[0].extensions["timeout"]["read"] == 2.5


# --- limits and rotation -------------------------------------------------------------------


def test_a_quota_429_rotates_without_backoff_and_marks_the_account(rig: Callable[..., Rig]) -> None:
    r = rig([answer(429, "Limit Exceeded"), png()], accounts=("acc1", "acc2"))
    assert r.render() == ChartSuccess(PNG, "acc2")
    assert not any(r.clock.sleeps)
    used = r.store.snapshot()["acc1"]
    # a 429 is refused before it is counted: its unit given back (the exhaustion is a field
    # of its own)
    assert (used["usageToday"], used["refundedToday"]) == (0, 1)
    assert used["exhaustedUntil"] == "2025-01-16T00:00:00.000Z"  # out for the UTC day
    assert r.api.limiter.exhausted_accounts() == ("acc1",)
    assert r.logs.events("chart-img accounts exhausted") == []
    r.render()
    assert r.transport.accounts == ["acc1", "acc2", "acc2"]


@pytest.mark.parametrize(
    "refusal",
    [
        httpx.Response(429, json={}),
        httpx.Response(429, content=b""),
        httpx.Response(429, json={"message": "Rate Limit Exceeded"}),
        httpx.Response(429, text="<html>slow down</html>"),
    ],
    ids=["empty-json", "empty-body", "rate-limit-exceeded", "html"],
)
def test_a_429_that_does_not_say_the_daily_limit_only_cools_the_key(
    rig: Callable[..., Rig], refusal: httpx.Response
) -> None:
    r = rig([refusal, png(), png()], accounts=("acc1", "acc2"))
    assert r.render() == ChartSuccess(PNG, "acc2")
    assert r.api.limiter.exhausted_accounts() == ()
    (cooling,) = r.logs.events("chart-img key rate-limited: cooling down")
    assert (cooling["accountId"], cooling["cooldownSeconds"]) == ("acc1", 1.0)
    # no Retry-After came; acc2 has not heard a 429: CHART-IMG is not throttling everyone
    assert (cooling["retryAfterSeconds"], cooling["chartImgThrottling"]) == (None, False)
    r.clock.advance(1.0)  # the first cooldown is over: acc1 (less used) is picked again
    assert r.render(template="tpl_b") == ChartSuccess(PNG, "acc1")


def test_a_rate_429_cools_the_key_down_without_exhausting_it(rig: Callable[..., Rig]) -> None:
    r = rig([answer(429, "Too Many Requests"), png()], accounts=("acc1", "acc2"))
    assert r.render() == ChartSuccess(PNG, "acc2")
    # it may be CHART-IMG throttling every key: the next attempt waits its backoff first
    assert r.clock.sleeps == [pytest.approx(0.75)]
    assert r.api.limiter.exhausted_accounts() == ()
    used = r.store.snapshot()["acc1"]
    assert (used["usageToday"], used["refundedToday"]) == (0, 1)  # refused before it was counted


def test_a_rate_429_on_the_only_key_waits_out_retry_after(rig: Callable[..., Rig]) -> None:
    limited = httpx.Response(429, json={"message": "Too Many Requests"}, headers={"retry-after": "2"})
    r = rig([limited, png()])
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert [s for s in r.clock.sleeps if s] == [pytest.approx(2.0)]  # the cooldown, then the same key
    assert r.transport.accounts == ["acc1", "acc1"]
    (cooling,) = r.logs.events("chart-img key rate-limited: cooling down")
    assert (cooling["cooldownSeconds"], cooling["retryAfterSeconds"]) == (2.0, 2.0)
    assert cooling["chartImgThrottling"] is True  # every usable key (the only one) heard 429
    assert r.api.limiter.exhausted_accounts() == ()


@pytest.mark.parametrize("status", [403, 201])
def test_the_daily_limit_wording_under_another_status_cools_without_exhausting(
    rig: Callable[..., Rig], status: int
) -> None:
    r = rig([answer(status, "Limit Exceeded"), png()], accounts=("acc1", "acc2"))
    assert r.render() == ChartSuccess(PNG, "acc2")
    assert r.api.limiter.exhausted_accounts() == () and "exhaustedUntil" not in r.store.snapshot()["acc1"]


def test_only_429s_give_limit_exceeded_and_one_error_event_per_step(rig: Callable[..., Rig]) -> None:
    r = rig([answer(429, "Limit Exceeded")], accounts=("acc1", "acc2"))
    with r.session() as step:
        error = failure(r.render(template="a", session=step))
        assert error["code"] == "CHART_API_LIMIT_EXCEEDED"
        assert error["details"]["httpStatus"] == 429
        assert error["details"]["exhaustedAccounts"] == ["acc1", "acc2"]
        assert error["details"]["attempts"] == 2
        assert len(r.transport.seen) == 2
        second = failure(r.render(template="b", session=step))  # same step: no HTTP call, no second event
        assert second["code"] == "CHART_API_LIMIT_EXCEEDED"
        assert len(r.transport.seen) == 2
        assert step.exhaustion_logged
    (event,) = r.logs.events("chart-img accounts exhausted")
    assert event["severity"] == "ERROR"
    assert event["error"] == {"code": "CHART_API_LIMIT_EXCEEDED"}
    assert event["exhaustedAccounts"] == ["acc1", "acc2"]
    assert event["chartsApi"] == {"mode": "real"}
    assert (event["runId"], event["stepId"], event["service"], event["env"]) == (
        "run-1",
        "step-1",
        "worker-chart-export",
        "test",
    )
    r.render(step_id="step-2")
    assert len(r.logs.events("chart-img accounts exhausted")) == 2


def test_all_accounts_at_their_limit_means_no_call(rig: Callable[..., Rig]) -> None:
    today = FakeClock().now().strftime("%Y-%m-%dT00:00:00Z")
    store = InMemoryUsageStore({a: {"usageToday": 44, "windowStart": today} for a in ("acc1", "acc2")})
    r = rig([png()], accounts=("acc1", "acc2"), store=store)
    error = failure(r.render())
    assert error["code"] == "CHART_API_LIMIT_EXCEEDED"
    assert error["details"]["exhaustedAccounts"] == ["acc1", "acc2"]
    assert error["details"]["attempts"] == 0
    assert r.transport.seen == []
    assert len(r.logs.events("chart-img accounts exhausted")) == 1


def test_5xx_then_quota_gone_is_limit_exceeded_with_the_last_error(rig: Callable[..., Rig]) -> None:
    r = rig([answer(500, "Something Went Wrong")], chart_img_daily_limit=1)
    error = failure(r.render())
    assert error["code"] == "CHART_API_LIMIT_EXCEEDED"
    assert error["details"]["lastError"]["details"]["httpStatus"] == 500
    assert len(r.transport.seen) == 1


def test_usage_store_outage_fails_the_request_without_a_call(rig: Callable[..., Rig]) -> None:
    class Down(InMemoryUsageStore):
        def reserve(self, *args: Any, **kwargs: Any) -> Any:
            raise TransientStoreError("firestore unavailable")

    r = rig([png()], store=Down())
    result = r.render()
    error = failure(result)
    # a chart failure: listed in the step's manifest, so one of the codes its schema allows
    # (chaos benchmark, seed 23: FIRESTORE_UNAVAILABLE here failed the manifest's own check,
    # and a step holding minImages charts ended FAILED WORKER_INTERNAL_ERROR)
    assert error["code"] == "CHART_API_FAILED"
    assert isinstance(result, ChartFailure) and result.error.retryable  # a bad moment: the step waits
    request: ChartRequestInput = {"chartTemplateId": "t1"}
    header = ManifestHeader("run-1", "step-1", "BTCUSDT", "1h", 1, [request], "real")
    build_manifest(header, [], [ManifestFailure(request, result.error)], created_at=FakeClock().now())
    assert error["message"] == "could not reserve CHART-IMG quota: the usage store is unavailable"
    # retried (no call was made: no attempt counted), as the store may come back
    assert error["details"] == {"errorKind": "usage_store", "exception": "TransientStoreError", "attempts": 0}
    assert r.transport.seen == []
    lines = r.logs.events("chart-img usage store unavailable")
    assert len(lines) == 5 and lines[0]["errorKind"] == "TransientStoreError"
    assert (lines[0]["runId"], lines[0]["stepId"], lines[0]["severity"]) == ("run-1", "step-1", "WARNING")


def test_a_reservation_that_took_the_budget_sends_nothing_and_gives_its_unit_back(
    rig: Callable[..., Rig],
) -> None:
    """The store took 4.5 s of the 5 s budget to commit the reservation (Firestore paused
    under it): less than an attempt's minimum is left, and a call sent now could only burn
    its unit, its answer never read (chaos benchmark, seed 11: an attempt started with a
    timeout of 0.0 s, CHART-IMG answered it, the worker read a ReadError and kept the unit
    CHART-IMG never charged). Nothing is sent, the unit goes back, the chart may be tried
    again (the step's next attempt)."""

    class SlowCommit(InMemoryUsageStore):
        clock: FakeClock | None = None

        def reserve(self, *args: Any, **kwargs: Any) -> Any:
            reservation = super().reserve(*args, **kwargs)
            assert self.clock is not None
            self.clock.advance(4.5)
            return reservation

    store = SlowCommit()
    r = rig([png()], store=store)
    store.clock = r.clock
    result = r.render(budget_seconds=5.0)
    assert r.transport.seen == []  # no call left
    assert isinstance(result, ChartFailure) and result.error.retryable
    assert result.error.details["errorKind"] == "budget"
    assert store.snapshot()["acc1"]["usageToday"] == 0  # its unit given back
    (line,) = r.logs.events("chartsApi.request")
    assert (line["accountId"], line["unitGivenBack"], line["errorKind"]) == ("acc1", True, "budget")


# --- wiring --------------------------------------------------------------------------------


def test_build_mock_needs_no_accounts(tmp_path: Path) -> None:
    api = build_chart_api(
        Settings(charts_api_mode="mock", charts_fixtures_dir=tmp_path), None, seams=Seams(SYSTEM_CLOCK)
    )
    assert isinstance(api, MockChartApi)
    assert api.library.directory == tmp_path / "chart-img/advanced-chart-v2"


@pytest.mark.parametrize("mode", ["real", "record"])
def test_build_without_accounts_is_a_config_error(mode: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_chart_api(Settings(charts_api_mode=mode), InMemoryUsageStore(), seams=Seams(SYSTEM_CLOCK))
    assert str(caught.value) == NO_ACCOUNTS_MESSAGE


def test_build_reads_accounts_from_the_secret() -> None:
    class Secrets:
        def access_secret_version(self, *, name: str) -> Any:
            payload = json.dumps([{"id": "acc1", "apiKey": KEYS["acc1"]}]).encode()
            return type("R", (), {"payload": type("P", (), {"data": payload})()})()

    settings = Settings(charts_api_mode="real", chart_img_accounts_secret="projects/p/secrets/s")
    api = build_chart_api(settings, InMemoryUsageStore(), secret_client=Secrets(), seams=Seams(SYSTEM_CLOCK))
    assert isinstance(api, RealChartApi)
    assert api.limiter.account_ids == ("acc1",)
    api.close()


def test_build_real_failure_codes_are_error_codes(rig: Callable[..., Rig]) -> None:
    r = rig([answer(422, "Invalid Symbol")])
    assert isinstance(r.api, RealChartApi) and r.api.mode == "real"
    assert failure(r.render())["code"] == ErrorCode.CHART_API_FAILED.value


# --- each account's plan -------------------------------------------------------------------


def pro_only(template: str = "tpl_pro") -> ChartCall:
    """A call only a PRO account may serve (its template asks for more than BASIC allows)."""
    return dataclasses.replace(chart_call(template), serving_plans=frozenset({"PRO"}))


def test_a_call_goes_only_to_an_account_whose_plan_serves_it(rig: Callable[..., Rig]) -> None:
    r = rig([png()], accounts=("acc1", "acc2"), plans={"acc1": "BASIC", "acc2": "PRO"})
    for _ in range(3):  # whatever the order the accounts would otherwise be picked in
        with r.session() as step:
            assert step.render(pro_only()) == ChartSuccess(PNG, "acc2")
    assert r.transport.accounts == ["acc2", "acc2", "acc2"]


def test_a_request_every_account_of_its_plan_refused_fails_alone(rig: Callable[..., Rig]) -> None:
    """The BASIC account could not have served it: once the only PRO account refused this very
    request, the request is what is refused, and no key is set aside."""
    r = rig([answer(403, "Forbidden")], accounts=("acc1", "acc2"), plans={"acc1": "PRO", "acc2": "BASIC"})
    with r.session() as step:
        error = failure(step.render(pro_only()))
    assert error["details"]["errorKind"] == "request_refused" and error["details"]["refusedBy"] == ["acc1"]
    assert r.transport.accounts == ["acc1"]
    assert list(r.api.limiter.usable_accounts()) == ["acc1", "acc2"]  # both keys stay in service


def test_a_call_whose_plan_is_out_of_quota_raises_no_alert_while_other_accounts_serve(
    rig: Callable[..., Rig],
) -> None:
    """The alert says every account is out: the only PRO account used up its day, the BASIC
    one still serves, so a PRO-only chart fails on its limit without the ERROR event."""
    r = rig(
        [answer(429, "Limit Exceeded")], accounts=("acc1", "acc2"), plans={"acc1": "PRO", "acc2": "BASIC"}
    )
    with r.session() as step:
        error = failure(step.render(pro_only()))
    assert error["code"] == "CHART_API_LIMIT_EXCEEDED" and r.transport.accounts == ["acc1"]
    assert r.api.limiter.exhausted_accounts() == ("acc1",)
    assert r.logs.events("chart-img accounts exhausted") == []


def test_a_key_refused_on_its_probe_is_disabled_again_at_once(rig: Callable[..., Rig]) -> None:
    """Disabled for refusing two requests, the key is probed once its hold passes; refused on
    that probe, it is disabled again at once, and the ERROR line says it was the probe."""
    r = rig([answer(403, "Forbidden")], chart_img_max_attempts=1)
    failure(r.render(symbol="BINANCE:AAAUSDT"))
    failure(r.render(symbol="BINANCE:BBBUSDT"))  # another request and the known-good chart refused
    assert [e["rule"] for e in r.logs.events("chart-img account key refused: account disabled")] == [
        "key refused for two requests, then for a known-good chart"
    ]
    r.clock.advance(16 * 60)  # past the hold: the next call is the key's probe
    failure(r.render(symbol="BINANCE:CCCUSDT"))
    rules = [e["rule"] for e in r.logs.events("chart-img account key refused: account disabled")]
    assert rules == ["key refused for two requests, then for a known-good chart", "key refused on its probe"]
    assert len(r.transport.seen) == 4


def disabled_then_probed(r: Rig) -> None:
    """acc1 refused for two requests and the known-good chart (disabled), then its hold
    passed: the next call probes it."""
    failure(r.render(symbol="BINANCE:AAAUSDT"))
    failure(r.render(symbol="BINANCE:BBBUSDT"))
    assert r.api.limiter.usable_accounts() == ()
    r.clock.advance(16 * 60)


def test_a_probe_answered_429_sets_the_key_aside_without_cooling_it(rig: Callable[..., Rig]) -> None:
    r = rig([answer(403, "Forbidden")] * 3 + [answer(429, "Too Many Requests")], chart_img_max_attempts=1)
    disabled_then_probed(r)
    failure(r.render(symbol="BINANCE:CCCUSDT"))
    (aside,) = r.logs.events("chart-img key keeps answering 429: set aside, then probed")
    assert aside["accountId"] == "acc1" and aside["answers"] == [
        {"httpStatus": 429, "message": "Too Many Requests"}
    ]
    assert r.logs.events("chart-img key rate-limited: cooling down") == []  # set aside, not cooled


def test_a_probe_answered_without_a_word_on_the_key_says_so(rig: Callable[..., Rig]) -> None:
    r = rig([answer(403, "Forbidden")] * 3 + [answer(503, "Service Unavailable")], chart_img_max_attempts=1)
    disabled_then_probed(r)
    failure(r.render(symbol="BINANCE:CCCUSDT"))
    (said,) = r.logs.events("chart-img probe answered without a verdict on the key")
    assert (said["severity"], said["httpStatus"], said["accountId"]) == ("INFO", 503, "acc1")


def test_a_dated_retry_after_is_logged_to_the_millisecond(rig: Callable[..., Rig]) -> None:
    from email.utils import format_datetime

    r = rig([], accounts=("acc1", "acc2"))
    r.clock.advance(0.25049)  # the date has whole seconds: what is left of it is not
    later = format_datetime(r.clock.now().replace(microsecond=0) + timedelta(seconds=3), usegmt=True)
    r.transport.answers = [
        httpx.Response(429, json={"message": "Too Many Requests"}, headers={"Retry-After": later}),
        png(),
    ]
    assert r.render() == ChartSuccess(PNG, "acc2")
    (cooling,) = r.logs.events("chart-img key rate-limited: cooling down")
    assert (cooling["cooldownSeconds"], cooling["retryAfterSeconds"]) == (2.75, pytest.approx(2.74951))


def test_a_retry_goes_to_an_account_the_request_has_not_tried_even_a_busier_one(
    rig: Callable[..., Rig],
) -> None:
    today = FakeClock().now().strftime("%Y-%m-%dT00:00:00Z")
    store = InMemoryUsageStore({"acc2": {"usageToday": 10, "windowStart": today}})
    answers = [png(), answer(500, "Something Went Wrong"), png()]
    r = rig(answers, accounts=("acc1", "acc2"), store=store, plans={"acc1": "BASIC", "acc2": "PRO"})
    with r.session() as step:
        assert step.render(pro_only()) == ChartSuccess(PNG, "acc2")  # acc2's day: 11 units used
    assert r.render() == ChartSuccess(PNG, "acc2")
    # the least used first, then the one it has not tried: not acc1 again
    assert r.transport.accounts == ["acc2", "acc1", "acc2"]


def test_a_probe_answered_200_puts_the_key_back_in_service_for_every_instance(
    rig: Callable[..., Rig],
) -> None:
    r = rig([answer(403, "Forbidden")] * 3 + [png()], chart_img_max_attempts=1)
    disabled_then_probed(r)
    assert r.render(symbol="BINANCE:CCCUSDT") == ChartSuccess(PNG, "acc1")
    (back,) = r.logs.events("chart-img key serves again: its probe answered 200")
    assert back["accountId"] == "acc1" and r.api.limiter.usable_accounts() == ("acc1",)
    assert r.store.snapshot()["acc1"]["disabled"] is False  # persisted: other instances use it again


def test_a_request_two_keys_refused_while_another_remains_is_the_requests_fault(
    rig: Callable[..., Rig],
) -> None:
    r = rig([answer(401, "Invalid Request")], accounts=("acc1", "acc2", "acc3"), chart_img_max_attempts=2)
    failure(r.render(symbol="BINANCE:AAAUSDT"))
    (said,) = r.logs.events("chart-img request refused by more than one key: the request's, no key blamed")
    assert (said["severity"], said["refusedBy"]) == ("INFO", ["acc1", "acc2"])
    assert (said["runId"], said["stepId"]) == ("run-1", "step-1")  # whose request it was
    failure(r.render(symbol="BINANCE:BBBUSDT"))  # the same two keys, another request: still no blame
    assert r.api.limiter.usable_accounts() == ("acc1", "acc2", "acc3")


def test_a_key_refused_for_a_request_that_failed_elsewhere_counts_against_the_key(
    rig: Callable[..., Rig],
) -> None:
    """Refused by one key only, the request was not shown to be at fault: the refusal counts,
    so the same key refusing the next request is disabled."""
    answers = [
        answer(401, "Invalid Request"),
        answer(500, "Something Went Wrong"),
        answer(401, "Invalid Request"),
        png(),
        answer(401, "Invalid Request"),  # the known-good chart, refused on acc1 too
    ]
    r = rig(answers, accounts=("acc1", "acc2"), chart_img_max_attempts=2)
    assert failure(r.render(symbol="BINANCE:AAAUSDT"))["details"]["httpStatus"] == 500
    assert r.render(symbol="BINANCE:BBBUSDT") == ChartSuccess(PNG, "acc2")
    assert r.transport.accounts == ["acc1", "acc2", "acc1", "acc2", "acc1"]
    (disabled,) = r.logs.events("chart-img account key refused: account disabled")
    assert (disabled["accountId"], disabled["rule"]) == (
        "acc1",
        "key refused for two requests, then for a known-good chart",
    )


def test_a_first_wave_call_that_fails_names_its_account_and_numbers_its_attempts(
    rig: Callable[..., Rig],
) -> None:
    r = rig([answer(500, "Something Went Wrong")])
    call = chart_call("tpl_a")
    with r.api.for_step([call], r.budget()) as step:  # its first attempt prepaid
        error = failure(step.render(call))
    assert (error["details"]["attempts"], error["details"]["accountIds"]) == (5, ["acc1"])
    assert [e["attempt"] for e in r.logs.events("chart api attempt started")] == [1, 2, 3, 4, 5]


def test_a_render_with_less_than_an_attempt_left_sends_nothing(rig: Callable[..., Rig]) -> None:
    r = rig([png()])
    error = failure(r.render(budget_seconds=0.5))  # an attempt needs 1 s (the policy's minimum)
    assert (error["details"]["errorKind"], error["details"]["attempts"]) == ("budget", 0)
    assert r.transport.seen == [] and r.store.snapshot() == {}


def test_an_attempt_needs_no_more_time_than_its_own_timeout(rig: Callable[..., Rig]) -> None:
    r = rig([png()], chart_img_request_timeout_seconds=0.5)
    assert r.render(budget_seconds=0.8) == ChartSuccess(PNG, "acc1")  # under the policy's 1 s


def test_an_account_without_a_plan_of_its_own_has_chart_img_plans(rig: Callable[..., Rig]) -> None:
    r = rig([png()], chart_img_plan="PRO")
    with r.session() as step:
        assert step.render(pro_only()) == ChartSuccess(PNG, "acc1")


def test_a_redirect_is_not_followed_so_the_key_goes_nowhere_else(rig: Callable[..., Rig]) -> None:
    r = rig(
        [httpx.Response(302, headers={"location": "https://elsewhere.test/steal"})], chart_img_max_attempts=1
    )
    assert failure(r.render())["details"]["httpStatus"] == 302
    assert [str(q.url) for q in r.transport.seen] == ["https://chart-img.test/v2/tradingview/advanced-chart"]


@pytest.mark.parametrize("trailing", ["", "/", "//"])
def test_the_base_url_is_used_as_given_with_its_path(rig: Callable[..., Rig], trailing: str) -> None:
    r = rig([png()], chart_img_base_url="https://chart-img.test/proX" + trailing)
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert [str(q.url) for q in r.transport.seen] == [
        "https://chart-img.test/proX/v2/tradingview/advanced-chart"
    ]


def test_the_connection_pool_holds_and_keeps_alive_one_connection_per_permit() -> None:
    from worker_chart_export.adapters.chart_img.http import ChartImgClient

    client = ChartImgClient(
        "https://chart-img.test", max_connections=32, request_timeout=30.0, clock=FakeClock()
    )  # 4 x 8
    pool = client._client._transport._pool  # httpx's own transport, built from the limits
    assert (pool._max_connections, pool._max_keepalive_connections, client.permits.size) == (32, 32, 32)
    client.close()
