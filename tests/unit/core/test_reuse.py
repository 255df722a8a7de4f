"""core/reuse.py: which PNGs an earlier execution of the step left that this one may list
again instead of paying CHART-IMG for them twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.naming import parse_png_object_path, png_object_path
from worker_chart_export.core.reuse import (
    choose_reusable,
    listing_prefix,
    listing_start,
    should_look,
)
from worker_chart_export.core.types import ChartCall

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
WINDOW = 900.0


def call(template: str = "price_v1", *, symbol: str = "BINANCE:BTCUSDT", interval: str = "1h") -> ChartCall:
    return ChartCall("run1", "charts", template, symbol, interval, {}, f"key-{template}")


def png(
    seconds_ago: float,
    template: str = "price_v1",
    *,
    run_id: str = "run1",
    step_id: str = "charts",
    symbol: str = "BINANCE:BTCUSDT",
    interval: str = "1h",
) -> str:
    return png_object_path(run_id, step_id, NOW - timedelta(seconds=seconds_ago), symbol, interval, template)


def chosen(paths: list[str], calls: list[ChartCall], window: float = WINDOW) -> dict[str, str]:
    found = choose_reusable(paths, calls, now=NOW, max_age_seconds=window)
    return {template: reusable.object_path for template, reusable in found.items()}


# --- whether to list at all ---------------------------------------------------------------


def test_a_first_attempt_with_no_manifest_named_lists_nothing() -> None:
    assert not should_look(WINDOW, 1, {"status": "RUNNING", "attempt": 1})
    assert not should_look(WINDOW, None, {})
    assert not should_look(WINDOW, 1, None)


def test_a_retried_attempt_lists_the_folder() -> None:
    assert should_look(WINDOW, 2, {})
    assert should_look(WINDOW, 3, None)


def test_a_step_that_already_names_a_manifest_lists_even_on_its_first_attempt() -> None:
    step = {"outputs": {"outputsManifestGcsUri": "gs://b/charts/run1/charts/manifest.json"}}
    assert should_look(WINDOW, 1, step)
    assert not should_look(WINDOW, 1, {"outputs": {"outputsManifestGcsUri": ""}})
    assert not should_look(WINDOW, 1, {"outputs": "not a mapping"})


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_reuse_turned_off_never_lists(window: float) -> None:
    assert not should_look(window, 5, {"outputs": {"outputsManifestGcsUri": "gs://b/m.json"}})
    assert chosen([png(1)], [call()], window=window) == {}


# --- where to list ------------------------------------------------------------------------


def test_the_listing_is_the_steps_own_folder_from_the_oldest_moment_that_may_qualify() -> None:
    assert listing_prefix("run1", "charts") == "charts/run1/charts/"
    start = listing_start("run1", "charts", NOW, WINDOW)
    assert start == "charts/run1/charts/20261123T114500000Z"
    # a PNG exactly at the window's edge sorts at or after the start: the listing keeps it
    assert png(WINDOW) >= start and png(WINDOW + 0.001) < start


def test_the_listing_start_never_skips_a_png_within_the_window_below_the_millisecond() -> None:
    now = NOW + timedelta(microseconds=999)
    start = listing_start("run1", "charts", now, WINDOW)
    edge = png_object_path("run1", "charts", now - timedelta(seconds=WINDOW), "BINANCE:BTCUSDT", "1h", "t")
    assert edge >= start


def test_ids_that_are_not_safe_path_segments_are_refused_before_any_listing() -> None:
    with pytest.raises(ValueError, match="runId"):
        listing_prefix("../etc", "charts")
    with pytest.raises(ValueError, match="stepId"):
        listing_start("run1", "a/b", NOW, WINDOW)


# --- which PNG is reused ------------------------------------------------------------------


def test_a_png_of_the_same_chart_within_the_window_is_reused_the_edge_included() -> None:
    assert chosen([png(WINDOW)], [call()]) == {"price_v1": png(WINDOW)}
    assert chosen([png(0)], [call()]) == {"price_v1": png(0)}


def test_a_png_older_than_the_window_or_from_the_future_is_not_reused() -> None:
    assert chosen([png(WINDOW + 0.001)], [call()]) == {}
    assert chosen([png(-0.001)], [call()]) == {}


def test_the_newest_of_several_is_reused() -> None:
    paths = [png(600), png(30), png(300)]
    assert chosen(paths, [call()]) == {"price_v1": png(30)}
    assert chosen(list(reversed(paths)), [call()]) == {"price_v1": png(30)}


def test_the_age_is_reported_as_seconds_since_generation() -> None:
    found = choose_reusable([png(42.5)], [call()], now=NOW, max_age_seconds=WINDOW)
    assert found["price_v1"].age_seconds == 42.5
    assert found["price_v1"].generated_at == NOW - timedelta(seconds=42.5)


@pytest.mark.parametrize(
    "other",
    [
        png(10, "another_v1"),
        png(10, symbol="BINANCE:ETHUSDT"),
        png(10, interval="4h"),
        png(10, step_id="other_step"),
        png(10, run_id="run2"),
    ],
    ids=["template", "symbol", "timeframe", "step", "run"],
)
def test_a_png_of_another_chart_is_never_reused(other: str) -> None:
    assert chosen([other], [call()]) == {}


@pytest.mark.parametrize(
    "name",
    [
        "charts/run1/charts/manifest.json",
        "charts/run1/charts/20261123T115959000Z_BINANCE-BTCUSDT_1h_price_v1.jpeg",
        "charts/run1/charts/not-a-moment_BINANCE-BTCUSDT_1h_price_v1.png",
        "charts/run1/charts/sub/20261123T115959000Z_BINANCE-BTCUSDT_1h_price_v1.png",
        "charts/run1/charts/20261123T115959000Z_binance-btcusdt_1h_price_v1.png",
        "",
    ],
)
def test_names_that_are_not_our_pngs_are_ignored(name: str) -> None:
    assert chosen([name, png(5)], [call()]) == {"price_v1": png(5)}
    assert chosen([name], [call()]) == {}


def test_each_call_gets_its_own_chart_and_calls_without_one_are_rendered() -> None:
    calls = [call("a_v1"), call("b_v1"), call("c_v1")]
    paths = [png(5, "a_v1"), png(8, "c_v1"), png(2000, "b_v1")]
    assert chosen(paths, calls) == {"a_v1": png(5, "a_v1"), "c_v1": png(8, "c_v1")}


def test_a_symbol_that_needs_a_digest_in_its_slug_is_matched_by_that_slug() -> None:
    formula = "(NASDAQ:MARA+NASDAQ:RIOT)/2"
    assert chosen([png(5, symbol=formula)], [call(symbol=formula)]) == {"price_v1": png(5, symbol=formula)}
    assert chosen([png(5, symbol="(NASDAQ:MARA-NASDAQ:RIOT)/2")], [call(symbol=formula)]) == {}


@given(
    ages=st.lists(st.floats(min_value=-100, max_value=3000, allow_nan=False), min_size=0, max_size=8),
    window=st.floats(min_value=0, max_value=2000, allow_nan=False),
)
def test_the_chosen_png_is_the_newest_one_within_the_window(ages: list[float], window: float) -> None:
    """The model: among the PNGs of the chart with 0 <= age <= window (ages as their names
    keep them, to the millisecond), the youngest; none when there is none or reuse is off."""
    paths = [png(age) for age in ages]
    found = choose_reusable(paths, [call()], now=NOW, max_age_seconds=window)
    kept = [(NOW - parse_png_object_path(p).generated_at).total_seconds() for p in paths]
    eligible = [age for age in kept if 0 <= age <= window] if window > 0 else []
    if not eligible:
        assert found == {}
    else:
        assert found["price_v1"].age_seconds == min(eligible)


def test_a_window_under_a_second_still_reuses_what_is_younger() -> None:
    assert chosen([png(0.2)], [call()], window=0.5) == {"price_v1": png(0.2)}
    assert should_look(0.5, 2, None)
