"""The limits one step runs under, as plain values: execute_step never sees Settings."""

from __future__ import annotations

from dataclasses import dataclass

from worker_chart_export.core.chart_img.plans import DEFAULT_PLANS, AccountPlans
from worker_chart_export.core.retry import ARTIFACT_WRITES, CHART_ATTEMPT_MIN_SECONDS, STEP_ATTEMPTS, Backoff
from worker_chart_export.core.step.reuse import DEFAULT_MAX_AGE_SECONDS

# Charts may not eat the time the manifest write needs: without a manifest the step fails.
MANIFEST_RESERVE_SECONDS = 20.0
MIN_STEP_BUDGET_SECONDS = 1.0
# CHART-IMG's Shared Layout: "Please set the minimum timeout to 60 seconds" (layout_bounds.json);
# CHART_IMG_LAYOUT_TIMEOUT_SECONDS' default
LAYOUT_CALL_SECONDS = 60.0


@dataclass(frozen=True)
class LayoutBudget:
    """Whether a step's charts have time for one layout call: its timeout and an attempt's
    minimum (core/retry.py) within the charts' share of the step's budget."""

    charts_seconds: float  # the step's budget less what is kept for the manifest
    step_seconds: float
    call_seconds: float  # CHART_IMG_LAYOUT_TIMEOUT_SECONDS
    attempt_min_seconds: float = CHART_ATTEMPT_MIN_SECONDS

    def problem(self) -> str | None:
        """Why a layout chart cannot be rendered in this step, with the numbers; None: it can."""
        needed = self.call_seconds + self.attempt_min_seconds
        if self.charts_seconds >= needed:
            return None
        kept = self.step_seconds - self.charts_seconds
        return (
            f"a layout call needs {needed:g} s (CHART_IMG_LAYOUT_TIMEOUT_SECONDS {self.call_seconds:g} "
            f"and an attempt's {self.attempt_min_seconds:g} s), this step's charts have "
            f"{self.charts_seconds:g} s (its {self.step_seconds:g} s budget less {kept:g} s kept for the "
            "manifest): raise "
            "REQUEST_TIMEOUT_SECONDS or lower CHART_IMG_LAYOUT_TIMEOUT_SECONDS"
        )


@dataclass(frozen=True)
class StepLimits:
    step_budget_seconds: float  # claim to the last artifact write
    finalize_budget_seconds: float  # recording the result, retries included
    lease_seconds: float  # how long a claim holds before another execution may take it over
    chart_concurrency: int = 8
    default_timezone: str = "Etc/UTC"
    manifest_reserve_seconds: float = MANIFEST_RESERVE_SECONDS  # at most; see charts_reserve
    # each account's plan (its own, else CHART_IMG_PLAN): what a template may ask for, and
    # which accounts may serve it
    plans: AccountPlans = DEFAULT_PLANS
    # CHART_REUSE_MAX_AGE_SECONDS: how old an earlier execution's PNG may be to be listed
    # again instead of rendered (core/step/reuse.py); 0: never
    chart_reuse_max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    # a PNG or the manifest written after paying: retried within the step's budget
    artifact_writes: Backoff = ARTIFACT_WRITES
    # the step's own attempts after a bad window (STEP_MAX_ATTEMPTS, STEP_RETRY_*_SECONDS)
    step_retries: Backoff = STEP_ATTEMPTS
    # one layout call's timeout (CHART_IMG_LAYOUT_TIMEOUT_SECONDS) when charts are really
    # called; None (mock mode): a fixture takes no time, a layout template needs none
    layout_call_seconds: float | None = None

    @classmethod
    def within_request(cls, request_timeout_seconds: float, finalize_budget_seconds: float) -> StepLimits:
        """The step runs inside one request: its budget is the request's timeout minus the
        finalize reserve, and its claim's lease lasts as long as the request may (the other
        limits keep their defaults: dataclasses.replace sets them)."""
        return cls(
            step_budget_seconds=max(
                MIN_STEP_BUDGET_SECONDS, request_timeout_seconds - finalize_budget_seconds
            ),
            finalize_budget_seconds=finalize_budget_seconds,
            lease_seconds=request_timeout_seconds,
        )

    @property
    def charts_reserve_seconds(self) -> float:
        """How much sooner than the step's budget rendering must stop (a short budget keeps
        most of its time for charts)."""
        return min(self.manifest_reserve_seconds, self.step_budget_seconds * 0.2)

    @property
    def layout_budget(self) -> LayoutBudget | None:
        """What validation holds a layout template to (None: no call, so no time needed)."""
        if self.layout_call_seconds is None:
            return None
        charts = self.step_budget_seconds - self.charts_reserve_seconds
        return LayoutBudget(charts, self.step_budget_seconds, self.layout_call_seconds)
