"""core/plans.py: an account's limits from its own values, its plan, the defaults."""

from __future__ import annotations

import pytest

from worker_chart_export.core.plans import PLANS, AccountLimits, account_limits, plan_named


def test_each_explicit_value_wins_over_the_plan_and_the_defaults() -> None:
    defaults = AccountLimits(44, 1.0, 3)
    assert account_limits(defaults, plan="PRO", daily_limit=7, rate_per_second=2.5, burst=9) == AccountLimits(
        7, 2.5, 9
    )
    assert account_limits(defaults, rate_per_second=0.5) == AccountLimits(44, 0.5, 3)


def test_an_unknown_plan_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        plan_named("gold")
    assert str(refused.value) == f"unknown CHART-IMG plan 'gold' (known: {', '.join(PLANS)})"
    assert plan_named("mega") is PLANS["MEGA"]
