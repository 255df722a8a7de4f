"""core/chart_img/set_aside.py: a key set aside for 15 minutes, then one probe, as the usage document
says it; and core/chart_img/usage.py's reservations that apply it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker_chart_export.core.chart_img.set_aside import (
    PROBE_SECONDS,
    SET_ASIDE_SECONDS,
    cooling_fields,
    disabled_at,
    probe_fields,
    refusal_now,
    serving_again_fields,
)
from worker_chart_export.core.chart_img.usage import ReservationTime, disabled_fields, reserve_one
from worker_chart_export.core.types import ReservationRefusal

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
TODAY = "2026-11-23T00:00:00Z"


def at(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


def test_a_set_aside_lasts_fifteen_minutes_and_a_probe_holds_others_off_a_minute() -> None:
    assert (SET_ASIDE_SECONDS, PROBE_SECONDS) == (900.0, 60.0)
    assert cooling_fields(reason="429 streak: r", now=NOW) == {
        "coolUntil": "2026-11-23T12:15:00.000Z",
        "coolReason": "429 streak: r",
    }
    assert disabled_fields(None, reason="refused", now=NOW)["disabledUntil"] == "2026-11-23T12:15:00.000Z"


@pytest.mark.parametrize(
    ("doc", "minutes", "refusal"),
    [
        (cooling_fields(reason="r", now=NOW), 14.9, ReservationRefusal.COOLING),
        (cooling_fields(reason="r", now=NOW), 15.0, None),  # its moment: the probe's turn
        ({"coolUntil": "2026-11-23T12:05:00Z"}, 4, ReservationRefusal.COOLING),  # someone else's: kept
        (
            {"disabled": True, "windowStart": TODAY, "disabledUntil": "2026-11-23T12:15:00.000Z"},
            14,
            ReservationRefusal.DISABLED,
        ),
        ({"disabled": True, "windowStart": TODAY, "disabledUntil": "2026-11-23T12:15:00.000Z"}, 15, None),
        (
            {"disabled": True, "windowStart": TODAY},
            600,
            ReservationRefusal.DISABLED,
        ),  # an older worker's: the day
        ({"disabled": True, "windowStart": TODAY, "disabledUntil": "soon"}, 600, ReservationRefusal.DISABLED),
        ({"disabled": True, "windowStart": "2026-11-22T00:00:00Z"}, 0, None),  # yesterday's: over
        ({"disabled": False, "windowStart": TODAY, "disabledUntil": "2026-11-23T12:15:00.000Z"}, 0, None),
        ({}, 0, None),
    ],
)
def test_what_refuses_a_reservation_now(
    doc: dict[str, Any], minutes: float, refusal: ReservationRefusal | None
) -> None:
    assert refusal_now(doc, at(minutes), TODAY) is refusal
    assert disabled_at(doc, at(minutes), TODAY) is (refusal is ReservationRefusal.DISABLED)


def test_the_first_reservation_after_a_set_aside_is_the_probe() -> None:
    doc = {"windowStart": TODAY, "usageToday": 3, **cooling_fields(reason="r", now=NOW)}
    update, probe = reserve_one("acc", doc, default_limit=44, at=ReservationTime(at(15)))
    assert probe.reserved and probe.probe
    assert update is not None and update["coolUntil"] == "2026-11-23T12:16:00.000Z"  # others wait
    held = {**doc, **update}
    _, other = reserve_one("acc", held, default_limit=44, at=ReservationTime(at(15.5)))
    assert (other.reserved, other.refusal) == (False, ReservationRefusal.COOLING)
    _, later = reserve_one("acc", held, default_limit=44, at=ReservationTime(at(16)))
    assert later.probe  # the probe never answered (its instance died): another probes


def test_only_our_own_set_asides_are_probed() -> None:
    assert probe_fields({"coolUntil": "2026-11-23T11:00:00Z"}, NOW, TODAY) == {}  # no reason: not ours
    assert probe_fields({"disabled": True, "windowStart": TODAY}, NOW, TODAY) == {}  # the day-long kind
    _, plain = reserve_one(
        "acc", {"windowStart": TODAY, "usageToday": 1}, default_limit=44, at=ReservationTime(NOW)
    )
    assert plain.reserved and not plain.probe
    both = {
        "windowStart": TODAY,
        "disabled": True,
        "disabledUntil": "2026-11-23T11:00:00Z",
        **cooling_fields(reason="r", now=at(-30)),
    }
    assert probe_fields(both, NOW, TODAY) == {
        "disabledUntil": "2026-11-23T12:01:00.000Z",
        "coolUntil": "2026-11-23T12:01:00.000Z",
    }


def test_a_probe_answered_200_clears_what_set_the_key_aside() -> None:
    doc = {"disabled": True, "disabledUntil": "x", "coolUntil": "y", "coolReason": "r", "usageToday": 3}
    assert serving_again_fields(doc) == {
        "coolUntil": None,
        "coolReason": None,
        "disabled": False,
        "disabledUntil": None,
    }
    assert serving_again_fields({"coolUntil": "y"}) == {}  # someone else's cooldown: not ours to clear
    assert serving_again_fields(None) == {}
