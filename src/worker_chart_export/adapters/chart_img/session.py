"""A step's chart session: what one execution of a step holds on this instance while its
charts render, as plain attributes of one object that dies with the step.

`RealChartApi.for_step` opens it around the step's renders and ends it when they end:
- `prepaid`: the first wave's leases (reserved in one round trip), one per call of the wave
  on an account whose plan serves that call, each owning one connection permit
  (permits.py). A render takes its call's lease, with its permit, for its first attempt;
  one on an account CHART-IMG has refused since is dropped (a call on it would only be
  refused again). When the session ends, what is left is dropped and its
  permits given back: never carried to a later execution of the step, whose day or slots it
  would not fit. A dropped lease never made a call, so its unit is given back too (the usage
  count is what CHART-IMG could have counted: docs/design.md, "Accounts and the limiter");
- `exhaustion_logged`: whether the step's one "accounts exhausted" ERROR line was written.

Nothing is keyed by step: two executions of the same step on one instance (a reaped one
finishing late while the retry starts) each have their own session and touch only it.
Its renders run on several threads at once (execute.py's pool).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from worker_chart_export.adapters.chart_img.http import HttpAnswer
from worker_chart_export.adapters.chart_img.limiter import AccountLimiter, Lease
from worker_chart_export.adapters.chart_img.permits import ConnectionPermits
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.types import ChartCall, ChartResult
from worker_chart_export.logs import get_logger


@dataclass(frozen=True)
class RenderedCall:
    result: ChartResult
    answer: HttpAnswer | None  # set when the result is exactly what one HTTP answer said


class Renderer(Protocol):
    """What renders a call within a session: RealChartApi's attempt loop."""

    def render_in(self, session: StepSession, call: ChartCall) -> RenderedCall: ...


def _key(call: ChartCall) -> tuple[str, str, str]:
    """A call within its step (the step's template ids are distinct)."""
    return (call.run_id, call.step_id, call.chart_template_id)


class StepSession:
    """One step's renders on this instance, within the step's `budget`."""

    def __init__(
        self,
        renderer: Renderer,
        budget: Budget,
        prepaid: Iterable[tuple[ChartCall, Lease]],
        *,
        limiter: AccountLimiter,
        permits: ConnectionPermits,
    ) -> None:
        self.budget = budget
        self.prepaid: dict[tuple[str, str, str], Lease] = {_key(call): lease for call, lease in prepaid}
        self.exhaustion_logged = False
        self._renderer = renderer
        self._limiter = limiter
        self._permits = permits
        self._lock = threading.Lock()

    def render(self, call: ChartCall) -> ChartResult:
        """Never raises for API-level failures: they come back as ChartFailure."""
        return self._renderer.render_in(self, call).result

    def render_with_answer(self, call: ChartCall) -> RenderedCall:
        return self._renderer.render_in(self, call)

    def take_prepaid(self, call: ChartCall, only: Collection[str] | None = None) -> Lease | None:
        """The call's prepaid lease, with its permit, if its account is still accepted (and
        among `only`, the accounts a layout chart may go to now; None: any)."""
        with self._lock:
            lease = self.prepaid.pop(_key(call), None)
        if lease is None:
            return None
        if self._limiter.still_accepted(lease.account_id) and (only is None or lease.account_id in only):
            return lease
        self._drop(lease)
        return None

    def drop_prepaid(self, call: ChartCall) -> None:
        """The call will not be sent (its layout no session can reach now): its prepaid
        lease, if any, goes back now, not when the step ends."""
        with self._lock:
            lease = self.prepaid.pop(_key(call), None)
        if lease is not None:
            self._drop(lease)

    def first_to_log_exhaustion(self) -> bool:
        """True the first time only: the step's one "accounts exhausted" ERROR line."""
        with self._lock:
            logged, self.exhaustion_logged = self.exhaustion_logged, True
        return not logged

    def end(self) -> None:
        """Drop the leases no render took, their units and permits given back. Renders still
        running (abandoned by the step) reserve one by one, like any other."""
        with self._lock:
            unused, self.prepaid = list(self.prepaid.values()), {}
        for lease in unused:
            self._drop(lease)

    def _drop(self, lease: Lease) -> None:
        """A lease no call will use: its permit back, and its unit (nothing was sent)."""
        self._permits.release()
        refund = self._limiter.give_back(lease)
        get_logger().info(
            "chart-img prepaid lease dropped",
            accountId=lease.account_id,
            unitGivenBack=refund is not None and refund.given_back,
        )
