"""The bundled error fixtures say what CHART-IMG documents (doc.chart-img.com, Errors, API v2),
are named after their bodies, never shadow a success fixture, and replay as the failure
the worker gives to the same live answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO
from worker_chart_export.adapters.fixtures import FixtureLibrary, replay
from worker_chart_export.bundled import chart_img_docs
from worker_chart_export.core.chart_img.answers import error_message
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.naming import ERROR_FIXTURE_NAME, error_fixture_name
from worker_chart_export.core.types import ChartFailure

FOLDER = REPO / "fixtures" / "chart-api" / "chart-img" / "advanced-chart-v2"
ERROR_FIXTURES = sorted(FOLDER.glob("*.json"))

# The API v2 error bodies the documentation shows, by status (contracts/chart-img/errors.json).
DOCUMENTED_MESSAGES = {
    status: chart_img_docs.errors().messages(status) for status in chart_img_docs.errors().examples
}
VALIDATION_ITEM_KEYS = {"value", "msg", "param", "location"}


def is_documented(status: int, body: Any) -> bool:
    if isinstance(body, dict):
        return set(body) == {"message"} and body["message"] in DOCUMENTED_MESSAGES.get(status, set())
    return (
        status == 422
        and isinstance(body, list)
        and bool(body)
        and all(isinstance(i, dict) and set(i) == VALIDATION_ITEM_KEYS for i in body)
        and all(i["location"] == "body" for i in body)
    )


def test_there_are_error_fixtures_for_each_documented_kind_used_in_mock_tests() -> None:
    statuses = {json.loads(p.read_text())["status"] for p in ERROR_FIXTURES}
    assert statuses >= {422, 429, 500}
    bodies = [json.loads(p.read_text())["body"] for p in ERROR_FIXTURES]
    assert any(isinstance(b, list) for b in bodies)  # the documented 422 array
    assert any(isinstance(b, dict) and b.get("message") == "Limit Exceeded" for b in bodies)


@pytest.mark.parametrize("path", ERROR_FIXTURES, ids=lambda p: p.name)
def test_error_fixture_is_documented_and_named_after_its_body(path: Path) -> None:
    recorded = json.loads(path.read_text())
    assert set(recorded) == {"status", "body"}
    status, body = recorded["status"], recorded["body"]
    assert is_documented(status, body), (status, body)
    match = ERROR_FIXTURE_NAME.fullmatch(path.name)
    assert match is not None and int(match["status"]) == status
    assert path.name == error_fixture_name(match["key"], status, error_message(body))
    # one fixture per key: an error fixture never shadows a success PNG
    assert not (FOLDER / f"{match['key']}.png").exists()


@pytest.mark.parametrize("path", ERROR_FIXTURES, ids=lambda p: p.name)
def test_error_fixture_replays_as_the_live_answer_would_fail(path: Path) -> None:
    match = ERROR_FIXTURE_NAME.fullmatch(path.name)
    assert match is not None
    recorded = FixtureLibrary(REPO / "fixtures" / "chart-api").lookup(match["key"])
    assert recorded is not None
    result = replay(recorded)
    assert isinstance(result, ChartFailure)
    status = json.loads(path.read_text())["status"]
    expected = ErrorCode.CHART_API_LIMIT_EXCEEDED if status == 429 else ErrorCode.CHART_API_FAILED
    assert result.error.code is expected
    assert result.error.details["httpStatus"] == status and result.error.details["fixture"] == path.name
    body = json.loads(path.read_text())["body"]
    if isinstance(body, list):  # each param and msg reaches failures[].error.details
        assert result.error.details["errors"] == [{"param": i["param"], "msg": i["msg"]} for i in body]
