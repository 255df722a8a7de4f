from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from worker_chart_export.core import naming

MOMENT = datetime(2026, 11, 22, 4, 12, 3, 123456, tzinfo=UTC)


def test_compact_and_rfc3339_forms_name_the_same_instant() -> None:
    assert naming.compact_utc(MOMENT) == "20261122T041203123Z"
    assert naming.rfc3339_utc(MOMENT) == "2026-11-22T04:12:03.123Z"
    plus_three = MOMENT.astimezone(timezone(timedelta(hours=3)))
    assert naming.compact_utc(plus_three) == "20261122T041203123Z"


@pytest.mark.parametrize(
    ("symbol", "slug"),
    [
        ("BINANCE:BTCUSDT", "BINANCE-BTCUSDT"),
        ("BYBIT:BTCUSDT.P", "BYBIT-BTCUSDT.P"),
        ("binance:eth_usdt", "BINANCE-ETH-USDT"),
        (":::", "UNKNOWN"),
    ],
)
def test_symbol_slug(symbol: str, slug: str) -> None:
    assert naming.symbol_slug(symbol) == slug
    assert "_" not in naming.symbol_slug(symbol)


def test_png_and_manifest_paths() -> None:
    path = naming.png_object_path("run1", "charts_1h", MOMENT, "BINANCE:BTCUSDT", "1h", "price_psar_adi_v1")
    assert path == "charts/run1/charts_1h/20261122T041203123Z_BINANCE-BTCUSDT_1h_price_psar_adi_v1.png"
    assert naming.manifest_object_path("run1", "charts_1h") == "charts/run1/charts_1h/manifest.json"
    assert naming.gcs_uri("bkt", path) == f"gs://bkt/{path}"


@pytest.mark.parametrize(
    "bad", ["..", "../etc", "a/b", "", " run", "run id", "a..b", "-lead", "x" * 129, "ü", None, 7]
)
def test_unsafe_segments_are_rejected(bad: object) -> None:
    assert not naming.is_safe_segment(bad)
    if isinstance(bad, str):
        with pytest.raises(ValueError, match="not a safe path segment"):
            naming.manifest_object_path(bad, "step")
        with pytest.raises(ValueError, match="not a safe path segment"):
            naming.manifest_object_path("run", bad)


def test_fixture_names() -> None:
    key = naming.fixture_key("BINANCE:BTCUSDT", "1h", "price_psar_adi_v1")
    assert key == "BINANCE_BTCUSDT__1h__price_psar_adi_v1"
    assert naming.fixture_key("BYBIT:BTCUSDT.P", "4h", "t") == "BYBIT_BTCUSDT.P__4h__t"
    assert naming.success_fixture_name(key) == f"{key}.png"
    name = naming.error_fixture_name(key, 429, "Limit Exceeded")
    assert name == f"{key}__429_LIMIT_EXCEEDED.json"
    match = naming.ERROR_FIXTURE_NAME.fullmatch(name)
    assert match and match.group("key") == key and match.group("status") == "429"
