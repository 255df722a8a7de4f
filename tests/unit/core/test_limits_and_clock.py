"""core/limits.py's defaults agree with the settings' defaults; core/clock.py's real sleep."""

from __future__ import annotations

from worker_chart_export.core.chart_img.plans import AccountPlans, plan_named
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.limits import MIN_STEP_BUDGET_SECONDS, StepLimits
from worker_chart_export.core.step.reuse import DEFAULT_MAX_AGE_SECONDS
from worker_chart_export.settings import Settings


def test_limits_within_a_request_default_to_what_an_unconfigured_deployment_runs() -> None:
    settings = Settings()
    limits = StepLimits.within_request(300.0, 30.0)
    assert limits == StepLimits(
        step_budget_seconds=270.0,
        finalize_budget_seconds=30.0,
        lease_seconds=300.0,
        chart_concurrency=settings.chart_concurrency,
        default_timezone=settings.charts_default_timezone,
        plans=AccountPlans(plan_named(settings.chart_img_plan)),
        chart_reuse_max_age_seconds=DEFAULT_MAX_AGE_SECONDS,
    )


def test_limits_within_a_request_take_their_budget_and_lease_from_it() -> None:
    limits = StepLimits.within_request(10.0, 9.5)
    assert limits.step_budget_seconds == MIN_STEP_BUDGET_SECONDS  # never less
    assert limits.lease_seconds == 10.0 and limits.finalize_budget_seconds == 9.5
    assert StepLimits.within_request(300.0, 20.0).step_budget_seconds == 280.0


def test_the_real_clock_sleeps_what_it_is_asked_and_not_for_nothing() -> None:
    began = SYSTEM_CLOCK.monotonic()
    SYSTEM_CLOCK.sleep(0.05)
    assert SYSTEM_CLOCK.monotonic() - began >= 0.05
    SYSTEM_CLOCK.sleep(-1.0)  # a negative wait is no wait, not an error
