"""Mock mode: fixture -> PNG, error fixture -> the failure it describes, none -> MOCK_MISSING."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from harness.builders import REPO
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.naming import fixture_key
from worker_chart_export.core.types import ChartCall, ChartEndpoint, ChartFailure, ChartSuccess

FIXTURES = REPO / "fixtures" / "chart-api"


def call_for(symbol: str, template_id: str = "price_psar_adi_v1", interval: str = "1h") -> ChartCall:
    return ChartCall(
        "run1",
        "charts",
        template_id,
        symbol,
        interval,
        {"symbol": symbol, "interval": interval},
        fixture_key(symbol, interval, template_id),
    )


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("mock mode opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_success_fixture_gives_the_png(no_network: None) -> None:
    result = MockChartApi(FixtureLibrary(FIXTURES)).render(call_for("BINANCE:BTCUSDT"))
    assert isinstance(result, ChartSuccess)
    expected = (
        FIXTURES / "chart-img/advanced-chart-v2/BINANCE_BTCUSDT__1h__price_psar_adi_v1.png"
    ).read_bytes()
    assert result.png == expected and result.png.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("symbol", "code", "status", "message"),
    [
        ("BINANCE:LIMITUSDT", ErrorCode.CHART_API_LIMIT_EXCEEDED, 429, "Limit Exceeded"),
        ("BINANCE:BROKENUSDT", ErrorCode.CHART_API_FAILED, 500, "Something Went Wrong"),
        ("BINANCE:NOSUCHCOIN", ErrorCode.CHART_API_FAILED, 422, "Invalid Symbol"),
    ],
)
def test_error_fixture_gives_the_failure_it_describes(
    no_network: None, symbol: str, code: ErrorCode, status: int, message: str
) -> None:
    result = MockChartApi(FixtureLibrary(FIXTURES)).render(call_for(symbol))
    assert isinstance(result, ChartFailure)
    assert result.error.code is code
    assert result.error.details["httpStatus"] == status
    assert result.error.details["message"] == message
    assert result.error.details["fixture"].endswith(".json")


def test_missing_fixture_is_mock_missing_and_logged(no_network: None, log_capture) -> None:  # type: ignore[no-untyped-def]
    call = call_for("BINANCE:ETHUSDT", interval="4h")
    result = MockChartApi(FixtureLibrary(FIXTURES)).render(call)
    assert isinstance(result, ChartFailure)
    assert result.error.code is ErrorCode.CHART_API_MOCK_MISSING
    assert result.error.details["fixtureKey"] == "BINANCE_ETHUSDT__4h__price_psar_adi_v1"
    [event] = log_capture.events("chart api fixture missing")
    assert event["chartsApi"] == {"mode": "mock", "fixtureKey": "BINANCE_ETHUSDT__4h__price_psar_adi_v1"}
    assert event["error"]["code"] == "CHART_API_MOCK_MISSING" and event["severity"] == "WARNING"


def test_success_fixture_wins_over_error_fixture_and_saves_round_trip(tmp_path: Path) -> None:
    library = FixtureLibrary(tmp_path)
    key = "X_Y__1h__t"
    library.save_error(key, 500, {"message": "Something Went Wrong"}, "Something Went Wrong")
    saved = json.loads((library.directory / f"{key}__500_SOMETHING_WENT_WRONG.json").read_text())
    assert saved == {"status": 500, "body": {"message": "Something Went Wrong"}}
    assert not isinstance(library.lookup(key), bytes)
    library.save_png(key, b"\x89PNG\r\n\x1a\nrest")
    assert library.lookup(key) == b"\x89PNG\r\n\x1a\nrest"


def test_error_fixture_of_a_longer_key_does_not_match(tmp_path: Path) -> None:
    library = FixtureLibrary(tmp_path)
    library.save_error("X_Y__1h__t__extra", 422, {"message": "Invalid Symbol"}, "Invalid Symbol")
    assert library.lookup("X_Y__1h__t") is None


def test_every_bundled_template_has_its_success_fixture() -> None:
    library = FixtureLibrary(FIXTURES)
    for path in (REPO / "chart-templates").glob("*.json"):
        template = json.loads(path.read_text())
        symbol = template["chartImgSymbolTemplate"].replace("{symbol}", "BTCUSDT")
        endpoint = ChartEndpoint.LAYOUT_CHART if "layout" in template else ChartEndpoint.ADVANCED_CHART
        recorded = library.lookup(fixture_key(symbol, "1h", template["id"]), endpoint)
        assert isinstance(recorded, bytes) and recorded.startswith(b"\x89PNG"), path.name
