"""The limits one step runs under, as plain values: execute_step never sees Settings."""

from __future__ import annotations

from dataclasses import dataclass

from worker_chart_export.core.chart_img.plans import DEFAULT_PLANS, AccountPlans
from worker_chart_export.core.retry import ARTIFACT_WRITES, STEP_ATTEMPTS, Backoff
from worker_chart_export.core.step.reuse import DEFAULT_MAX_AGE_SECONDS

# Charts may not eat the time the manifest write needs: without a manifest the step fails.
MANIFEST_RESERVE_SECONDS = 20.0
MIN_STEP_BUDGET_SECONDS = 1.0


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

    @classmethod
    def within_request(
        cls,
        request_timeout_seconds: float,
        finalize_budget_seconds: float,
        *,
        chart_concurrency: int = 8,
        default_timezone: str = "Etc/UTC",
        plans: AccountPlans = DEFAULT_PLANS,
        chart_reuse_max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        step_retries: Backoff = STEP_ATTEMPTS,
    ) -> StepLimits:
        """The step runs inside one request: its budget is the request's timeout minus the
        finalize reserve, and its claim's lease lasts as long as the request may."""
        return cls(
            step_budget_seconds=max(
                MIN_STEP_BUDGET_SECONDS, request_timeout_seconds - finalize_budget_seconds
            ),
            finalize_budget_seconds=finalize_budget_seconds,
            lease_seconds=request_timeout_seconds,
            chart_concurrency=chart_concurrency,
            default_timezone=default_timezone,
            plans=plans,
            chart_reuse_max_age_seconds=chart_reuse_max_age_seconds,
            step_retries=step_retries,
        )

    @property
    def charts_reserve_seconds(self) -> float:
        """How much sooner than the step's budget rendering must stop (a short budget keeps
        most of its time for charts)."""
        return min(self.manifest_reserve_seconds, self.step_budget_seconds * 0.2)
