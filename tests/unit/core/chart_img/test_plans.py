"""core/chart_img/plans.py: an account's limits from its own values, its plan, the defaults."""

from __future__ import annotations

import itertools

import pytest

from worker_chart_export.core.chart_img.plans import (
    DEFAULT_PLANS,
    PLANS,
    AccountLimits,
    AccountPlans,
    account_limits,
    plan_named,
    rank,
)


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


def test_each_accounts_plan_is_its_own_else_the_setting() -> None:
    plans = AccountPlans.of(PLANS["BASIC"], [("b", None), ("p", "pro"), ("u", "ULTRA"), ("p2", "PRO")])
    assert plans.by_account == (
        ("b", PLANS["BASIC"]),
        ("p", PLANS["PRO"]),
        ("u", PLANS["ULTRA"]),
        ("p2", PLANS["PRO"]),
    )
    assert plans.plans == (PLANS["BASIC"], PLANS["PRO"], PLANS["ULTRA"])  # distinct, smallest first
    assert plans.best is PLANS["ULTRA"]
    assert plans.accounts_on({"PRO"}) == ("p", "p2")
    assert plans.describe() == "b BASIC, p PRO, u ULTRA, p2 PRO"


def test_without_accounts_the_setting_stands_for_them() -> None:
    plans = AccountPlans.of(PLANS["MEGA"], [])
    assert (plans.plans, plans.best, plans.accounts_on({"MEGA"})) == ((PLANS["MEGA"],), PLANS["MEGA"], ())
    assert plans.describe() == "CHART_IMG_PLAN MEGA, no account configured"
    assert AccountPlans(PLANS["BASIC"]) == DEFAULT_PLANS


def test_plans_rank_smallest_first_and_each_allows_what_the_ones_before_allow() -> None:
    ranked = sorted(PLANS.values(), key=rank)
    assert [p.name for p in ranked] == ["BASIC", "PRO", "MEGA", "ULTRA", "ENTERPRISE"]
    for smaller, bigger in itertools.pairwise(ranked):
        assert bigger.max_width >= smaller.max_width and bigger.max_height >= smaller.max_height
        assert bigger.max_parameters >= smaller.max_parameters
