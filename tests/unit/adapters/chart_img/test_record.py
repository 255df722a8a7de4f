"""Record mode (adapters/chart_img/record.py): replay what is recorded, else call CHART-IMG
and keep an answer about the request, never one about the moment or the key. Over the
scripted transport and a FakeClock (scripted.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from harness.chart_img_server import PNG, chart_call
from harness.logs import picked
from unit.adapters.chart_img.scripted import Answer, Rig, answer, failure, png
from worker_chart_export.adapters.chart_img.assembly import RecordChartApi
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.core.types import ChartFailure, ChartSuccess, LayoutTarget


def test_record_saves_png_then_replays_without_http(rig: Callable[..., Rig], tmp_path: Path) -> None:
    r = rig([png()], mode="record")
    assert isinstance(r.api, RecordChartApi)
    first = r.render(template="tpl_a")
    again = r.render(template="tpl_a")
    assert first == ChartSuccess(PNG, "acc1")
    assert again == ChartSuccess(PNG)  # replayed: no account used
    assert len(r.transport.seen) == 1
    saved = tmp_path / "fixtures/chart-img/advanced-chart-v2/BINANCE_BTCUSDT__1h__tpl_a.png"
    assert saved.read_bytes() == PNG
    (event,) = r.logs.events("chartsApi.request")
    assert event["chartsApi"] == {
        "mode": "record",
        "accountId": "acc1",
        "endpoint": "advanced-chart",
        "fixtureKey": "BINANCE_BTCUSDT__1h__tpl_a",
    }
    the_call = {
        "runId": "run-1",
        "stepId": "step-1",
        "chartTemplateId": "tpl_a",
        "chartsApi": {"mode": "record", "fixtureKey": "BINANCE_BTCUSDT__1h__tpl_a"},
    }
    (recorded,) = r.logs.events("chart api fixture recorded")
    assert picked(recorded, *the_call, "fixture", "httpStatus") == {
        **the_call,
        "fixture": "BINANCE_BTCUSDT__1h__tpl_a.png",
        "httpStatus": 200,
    }
    (replayed,) = r.logs.events("chart api fixture replayed")
    assert picked(replayed, *the_call, "status", "errorCode") == {
        **the_call,
        "status": "succeeded",
        "errorCode": None,
    }


def test_record_saves_an_answer_about_the_request_as_sent(rig: Callable[..., Rig], tmp_path: Path) -> None:
    r = rig([answer(422, "Invalid Symbol")], mode="record")
    recorded = failure(r.render(template="tpl_b"))
    path = (
        tmp_path / "fixtures/chart-img/advanced-chart-v2/BINANCE_BTCUSDT__1h__tpl_b__422_INVALID_SYMBOL.json"
    )
    assert json.loads(path.read_text()) == {"status": 422, "body": {"message": "Invalid Symbol"}}
    replayed = MockChartApi(FixtureLibrary(tmp_path / "fixtures")).render(chart_call("tpl_b"))
    assert failure(replayed)["message"] == recorded["message"]
    assert failure(replayed)["code"] == recorded["code"] == "CHART_API_FAILED"
    (line,) = r.logs.events("chart api fixture recorded")
    assert (line["fixture"], line["httpStatus"]) == (path.name, 422)
    # replayed through record mode too: the failure as recorded, and said so
    assert failure(r.render(template="tpl_b")) == failure(replayed)
    (line,) = r.logs.events("chart api fixture replayed")
    assert (line["status"], line["errorCode"], line["chartTemplateId"]) == (
        "failed",
        "CHART_API_FAILED",
        "tpl_b",
    )


def test_an_answer_about_the_request_without_words_is_recorded_as_error(
    rig: Callable[..., Rig], tmp_path: Path
) -> None:
    r = rig([answer(422)], mode="record")
    failure(r.render(template="tpl_b"))
    path = tmp_path / "fixtures/chart-img/advanced-chart-v2/BINANCE_BTCUSDT__1h__tpl_b__422_ERROR.json"
    assert json.loads(path.read_text()) == {"status": 422, "body": {}}


def test_a_fixture_that_cannot_be_written_is_said_and_the_step_goes_on(
    rig: Callable[..., Rig], tmp_path: Path
) -> None:
    r = rig([png()], mode="record")
    (tmp_path / "fixtures").write_text("a file where the fixtures folder should be")
    assert r.render(template="tpl_a") == ChartSuccess(PNG, "acc1")
    (line,) = r.logs.events("chart api fixture not recorded")
    assert (line["severity"], line["errorKind"], line["chartTemplateId"]) == (
        "WARNING",
        "NotADirectoryError",
        "tpl_a",
    )


@pytest.mark.parametrize(
    "answers",
    [
        [answer(429, "Limit Exceeded")],
        [answer(429, "Too Many Requests")],
        [answer(503, "Service Unavailable")],
        [answer(403, "Forbidden")],
        [answer(401, "Invalid Request")],
        [answer(201, "Limit Exceeded")],  # the quota's words make it one, whatever the status
    ],
    ids=["quota-429", "rate-429", "5xx", "bad-key-403", "401", "quota-words-201"],
)
def test_record_never_freezes_an_answer_about_the_moment_or_the_key(
    rig: Callable[..., Rig], tmp_path: Path, answers: list[Answer]
) -> None:
    r = rig(answers, mode="record", chart_img_max_attempts=1)
    assert isinstance(r.render(template="tpl_c"), ChartFailure)
    assert not list((tmp_path / "fixtures").rglob("*tpl_c*"))
    (line,) = r.logs.events("chart api answer not recorded: transient")
    assert (line["httpStatus"], line["chartTemplateId"]) == (answers[0].status_code, "tpl_c")


def test_record_never_freezes_a_refused_tradingview_session(rig: Callable[..., Rig], tmp_path: Path) -> None:
    """A 409 to a layout chart sent with a session says the session is no longer accepted:
    about the session, not the chart (frozen, every replay would fail)."""
    sessions = [{"id": "mine", "sessionId": "tv-session-0123456789", "sessionIdSign": "tv-sign-0123456789"}]
    r = rig(
        [answer(409, "Session Disconnected")],
        mode="record",
        chart_img_max_attempts=1,
        chart_img_sessions_json=SecretStr(json.dumps(sessions)),
    )
    call = replace(chart_call("tpl_l"), layout=LayoutTarget("Private1", private=True, session="mine"))
    with r.session(60.0) as step:
        assert isinstance(step.render(call), ChartFailure)
    assert not list((tmp_path / "fixtures").rglob("*tpl_l*"))
    (line,) = r.logs.events("chart api answer not recorded: transient")
    assert line["httpStatus"] == 409


@pytest.mark.parametrize(
    "answers",
    [
        [httpx.ReadTimeout("slow")],
        [httpx.Response(200, content=b"<html/>", headers={"content-type": "text/html"})],
    ],
)
def test_record_keeps_no_fixture_without_a_real_answer(
    rig: Callable[..., Rig], tmp_path: Path, answers: list[Answer]
) -> None:
    r = rig(answers, mode="record")
    assert failure(r.render())["code"] == "CHART_API_FAILED"
    assert not list((tmp_path / "fixtures").rglob("*.*"))


def test_a_steps_first_wave_reserves_only_what_is_not_recorded(rig: Callable[..., Rig]) -> None:
    r = rig([png()], mode="record")
    r.render(template="tpl_a")  # recorded: replayed from now on
    with r.api.for_step([chart_call("tpl_a"), chart_call("tpl_b")], r.budget()) as step:
        assert r.store.snapshot()["acc1"]["usageToday"] == 1 + 1  # tpl_b's first attempt only
        assert step.render(chart_call("tpl_a")) == ChartSuccess(PNG)
        assert step.render(chart_call("tpl_b")) == ChartSuccess(PNG, "acc1")
    assert r.store.snapshot()["acc1"]["usageToday"] == 2 and len(r.transport.seen) == 2
