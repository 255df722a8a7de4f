"""core/step_rules.py: the rules the stores and the fence share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from worker_chart_export.core.step_rules import LEASE_SAFETY_MARGIN, lease_surely_held

LEASE_END = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def test_a_lease_is_surely_held_until_the_margin_before_its_end() -> None:
    last_sure_moment = LEASE_END - LEASE_SAFETY_MARGIN - timedelta(microseconds=1)
    assert lease_surely_held(LEASE_END, LEASE_END - timedelta(minutes=9))
    assert lease_surely_held(LEASE_END, last_sure_moment)
    assert not lease_surely_held(LEASE_END, LEASE_END - LEASE_SAFETY_MARGIN)  # from here: ask the store
    assert not lease_surely_held(LEASE_END, LEASE_END + timedelta(seconds=1))


def test_the_margin_can_be_chosen() -> None:
    now = LEASE_END - timedelta(seconds=10)
    assert lease_surely_held(LEASE_END, now, margin=timedelta(seconds=5))
    assert not lease_surely_held(LEASE_END, now, margin=timedelta(seconds=15))
