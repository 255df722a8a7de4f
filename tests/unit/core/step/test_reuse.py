"""core/step/reuse.py: which PNGs an earlier execution of the step left that this one may list
again instead of paying CHART-IMG for them twice: only those rendered from the very body it
would send now, stored as PNGs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.naming_contract import request_sha256
from worker_chart_export.core.naming import png_object_path
from worker_chart_export.core.step.reuse import (
    ReuseRefusal,
    listing_prefix,
    listing_start,
    png_metadata,
    reuse_candidates,
    should_look,
)
from worker_chart_export.core.types import ChartCall, ListedObject

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
WINDOW = 900.0


def request_body(symbol: str = "BINANCE:BTCUSDT", interval: str = "1h", **template: Any) -> dict[str, Any]:
    return {"theme": "dark", **template, "timezone": "Etc/UTC", "symbol": symbol, "interval": interval}


def call(template: str = "price_v1", *, symbol: str = "BINANCE:BTCUSDT", interval: str = "1h") -> ChartCall:
    return ChartCall(
        "run1", "charts", template, symbol, interval, request_body(symbol, interval), f"key-{template}"
    )


def png(
    seconds_ago: float,
    template: str = "price_v1",
    *,
    run_id: str = "run1",
    step_id: str = "charts",
    symbol: str = "BINANCE:BTCUSDT",
    interval: str = "1h",
) -> str:
    """An input: the name the worker gives such a PNG (core/naming, tested against the contract's
    literals in test_naming), whatever the symbol's slug rule."""
    return png_object_path(run_id, step_id, NOW - timedelta(seconds=seconds_ago), symbol, interval, template)


def listed(
    path: str,
    body: dict[str, Any] | None = None,
    *,
    content_type: str | None = "image/png",
    metadata: dict[str, str] | None = None,
) -> ListedObject:
    """An object as a listing shows it; by default a PNG written for `body` (the default call's),
    stamped with the contract's requestDigest of it."""
    digest = request_sha256(body or request_body())
    stamped = png_metadata(digest, "token-1") if metadata is None else metadata
    return ListedObject(path, content_type, stamped)


def chosen(
    objects: list[ListedObject | str], calls: list[ChartCall], window: float = WINDOW
) -> dict[str, str]:
    """What would be reused if every PNG's bytes were a PNG's: the newest unrefused one."""
    found = reuse_candidates(
        [listed(o) if isinstance(o, str) else o for o in objects], calls, now=NOW, max_age_seconds=window
    )
    return {
        template: next(c.object_path for c in listed_pngs if c.refusal is None)
        for template, listed_pngs in found.items()
        if any(c.refusal is None for c in listed_pngs)
    }


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


def test_a_png_older_than_the_window_or_from_the_future_is_not_even_a_candidate() -> None:
    for path in (png(WINDOW + 0.001), png(-0.001)):
        assert reuse_candidates([listed(path)], [call()], now=NOW, max_age_seconds=WINDOW) == {}


def test_the_newest_of_several_is_reused() -> None:
    paths: list[ListedObject | str] = [png(600), png(30), png(300)]
    assert chosen(paths, [call()]) == {"price_v1": png(30)}
    assert chosen(list(reversed(paths)), [call()]) == {"price_v1": png(30)}


def test_candidates_come_newest_first_with_their_age() -> None:
    found = reuse_candidates([listed(png(42.5)), listed(png(7))], [call()], now=NOW, max_age_seconds=WINDOW)
    assert [c.age_seconds for c in found["price_v1"]] == [7.0, 42.5]
    assert found["price_v1"][1].generated_at == NOW - timedelta(seconds=42.5)
    assert [c.refusal for c in found["price_v1"]] == [None, None]


@pytest.mark.parametrize(
    ("other", "body"),
    [
        (png(10, symbol="BINANCE:ETHUSDT"), request_body("BINANCE:ETHUSDT")),
        (png(10, interval="4h"), request_body(interval="4h")),
        (png(10), request_body(theme="light")),  # the template was edited meanwhile
        (png(10), request_body(studies=[{"name": "Volume"}])),
    ],
    ids=["symbol", "timeframe", "template", "studies"],
)
def test_a_png_rendered_from_another_body_is_refused_whatever_its_name(
    other: str, body: dict[str, Any]
) -> None:
    found = reuse_candidates([listed(other, body)], [call()], now=NOW, max_age_seconds=WINDOW)
    assert [c.refusal for c in found["price_v1"]] == [ReuseRefusal.OTHER_REQUEST]
    assert chosen([listed(other, body)], [call()]) == {}


def test_symbols_whose_slugs_collide_never_stand_for_each_other() -> None:
    ours, theirs = "BINANCE_US:BTCUSD", "BINANCE:US_BTCUSD"
    their_png = png(10, symbol=theirs)
    assert their_png == png(10, symbol=ours)  # one name for both: the name cannot tell them apart
    found = reuse_candidates(
        [listed(their_png, request_body(theirs))], [call(symbol=ours)], now=NOW, max_age_seconds=WINDOW
    )
    assert [c.refusal for c in found["price_v1"]] == [ReuseRefusal.OTHER_REQUEST]
    mine = listed(png(20, symbol=ours), request_body(ours))
    assert chosen([listed(their_png, request_body(theirs)), mine], [call(symbol=ours)]) == {
        "price_v1": mine.name
    }


@pytest.mark.parametrize(
    ("planted", "refusal"),
    [
        (listed(png(10), content_type="text/html"), ReuseRefusal.NOT_IMAGE_PNG),
        (listed(png(10), content_type=None), ReuseRefusal.NOT_IMAGE_PNG),
        (listed(png(10), metadata={}), ReuseRefusal.NO_DIGEST),
        (listed(png(10), metadata={"claimToken": "t"}), ReuseRefusal.NO_DIGEST),
        (listed(png(10), metadata={"requestDigest": ""}), ReuseRefusal.NO_DIGEST),
        (listed(png(10), metadata={"requestDigest": "0" * 64}), ReuseRefusal.OTHER_REQUEST),
        # a page planted under a PNG's name, carrying a copied digest: its type still says no
        (
            listed(
                png(10), content_type="text/html", metadata=png_metadata(request_sha256(request_body()), "x")
            ),
            ReuseRefusal.NOT_IMAGE_PNG,
        ),
    ],
    ids=["html", "no-type", "no-metadata", "token-only", "empty-digest", "other-digest", "html-with-digest"],
)
def test_what_the_listing_shows_against_an_object_refuses_it(
    planted: ListedObject, refusal: ReuseRefusal
) -> None:
    found = reuse_candidates([planted], [call()], now=NOW, max_age_seconds=WINDOW)
    assert [c.refusal for c in found["price_v1"]] == [refusal]


def test_a_refused_newer_png_leaves_an_older_good_one_as_the_next_candidate() -> None:
    newer = listed(png(5), request_body(theme="light"))
    older = listed(png(50))
    found = reuse_candidates([older, newer], [call()], now=NOW, max_age_seconds=WINDOW)
    assert [(c.object_path, c.refusal) for c in found["price_v1"]] == [
        (newer.name, ReuseRefusal.OTHER_REQUEST),
        (older.name, None),
    ]


@pytest.mark.parametrize(
    "other",
    [png(10, "another_v1"), png(10, step_id="other_step"), png(10, run_id="run2")],
    ids=["template", "step", "run"],
)
def test_a_png_of_another_chart_is_not_even_a_candidate(other: str) -> None:
    assert reuse_candidates([listed(other)], [call()], now=NOW, max_age_seconds=WINDOW) == {}


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
    assert reuse_candidates([listed(name)], [call()], now=NOW, max_age_seconds=WINDOW) == {}


def test_each_call_gets_its_own_chart_and_calls_without_one_are_rendered() -> None:
    calls = [call("a_v1"), call("b_v1"), call("c_v1")]
    paths: list[ListedObject | str] = [png(5, "a_v1"), png(8, "c_v1"), png(2000, "b_v1")]
    assert chosen(paths, calls) == {"a_v1": png(5, "a_v1"), "c_v1": png(8, "c_v1")}


def test_a_symbol_that_needs_a_digest_in_its_slug_is_matched_by_its_body() -> None:
    formula, other = "(NASDAQ:MARA+NASDAQ:RIOT)/2", "(NASDAQ:MARA-NASDAQ:RIOT)/2"
    mine = listed(png(5, symbol=formula), request_body(formula))
    assert chosen([mine], [call(symbol=formula)]) == {"price_v1": mine.name}
    assert chosen([listed(png(5, symbol=other), request_body(other))], [call(symbol=formula)]) == {}


def test_a_png_carries_the_digest_of_its_body_and_the_claim_that_wrote_it() -> None:
    assert png_metadata("d" * 64, "token-1") == {"requestDigest": "d" * 64, "claimToken": "token-1"}


@given(
    ages=st.lists(st.floats(min_value=-100, max_value=3000, allow_nan=False), min_size=0, max_size=8),
    window=st.floats(min_value=0, max_value=2000, allow_nan=False),
)
def test_the_candidates_are_the_pngs_within_the_window_newest_first(ages: list[float], window: float) -> None:
    """The model: the PNGs of the chart with 0 <= age <= window (ages as their names keep
    them, to the millisecond), youngest first; none when reuse is off."""
    paths = [png(age) for age in ages]
    found = reuse_candidates([listed(p) for p in paths], [call()], now=NOW, max_age_seconds=window)
    # a name keeps its moment to the millisecond, microseconds cut (the naming contract)
    moments = [NOW - timedelta(seconds=age) for age in ages]
    kept = [(NOW - m.replace(microsecond=m.microsecond // 1000 * 1000)).total_seconds() for m in moments]
    eligible = sorted(age for age in kept if 0 <= age <= window) if window > 0 else []
    assert [c.age_seconds for c in found.get("price_v1", [])] == eligible


def test_a_window_under_a_second_still_reuses_what_is_younger() -> None:
    assert chosen([png(0.2)], [call()], window=0.5) == {"price_v1": png(0.2)}
    assert should_look(0.5, 2, None)
