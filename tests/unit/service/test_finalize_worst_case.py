"""The finalize's worst case, as service/finalize.py's docstring states it: computed here from
the constants its three layers use, and held by the retry loop on a FakeClock (no sleeping)
against a store that keeps failing, each call as fast or as slow as the inner layers allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
)
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import FinalizeFailed, TransientStoreError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.retry import FINALIZE
from worker_chart_export.core.types import FinalizeResult, StepFinal, StepStatus
from worker_chart_export.logs import get_logger
from worker_chart_export.service import finalize as finalize_module
from worker_chart_export.service.finalize import finalize
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.step_context import StepContext
from worker_chart_export.settings import Settings
from worker_chart_export.testing import FakeClock

F = Settings.model_fields["finalize_budget_seconds"].default  # layer 1: the finalize budget
A = DEFAULT_TRANSACTION_ATTEMPTS  # layer 2: the compare-and-set rounds of one store call
T = DEFAULT_RPC_TIMEOUT_SECONDS  # layer 3: api_core's retry deadline on each RPC
RPC = 2 * T  # no attempt after T; one started in T's last second is given T again
CALL = (1 + 2 * A) * RPC  # a read, then A rounds of a commit and a read
WORST = F + CALL  # the last call starts by F
WORST_REFUSED = F + 2 * CALL  # the result refused, then the bare failure: one more call


def test_the_docstring_states_the_worst_case_of_the_constants() -> None:
    doc = finalize_module.__doc__ or ""
    assert f"(settings: {F:g} s)" in doc
    assert f"A = DEFAULT_TRANSACTION_ATTEMPTS = {A}" in doc and f"1 + 2A = {1 + 2 * A} RPCs" in doc
    assert f"T = DEFAULT_RPC_TIMEOUT_SECONDS = {T:g} s" in doc and f"2T = {RPC:g} s" in doc
    assert f"= {CALL:g} s" in doc and f"= {WORST:g} s" in doc and f"= {WORST_REFUSED:g} s" in doc
    assert FINALIZE.cap == 5.0 and "at most 5 s" in doc


class NotUsed:
    mode = "mock"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"finalize used {name}")


@dataclass
class FailingStore:
    """finalize_step unavailable for ever: at once until the clock reaches `slow_from`, then
    each call as slow as layers 2 and 3 allow (CALL), and with `refuse`, refusing the result
    itself rather than being unavailable."""

    clock: FakeClock
    slow_from: float = float("inf")
    refuse: bool = False
    calls: int = 0

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        self.calls += 1
        if self.clock.elapsed >= self.slow_from:
            self.clock.advance(CALL)
            if self.refuse:
                raise ValueError("400 maximum entity size is 1048576 bytes")
        raise TransientStoreError("finalize: 503 Service Unavailable")


def finalize_against(store: FailingStore) -> None:
    limits = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=F)
    ports = Ports(flow_runs=store, templates=NotUsed(), artifacts=NotUsed(), chart_api=NotUsed())
    budget = Budget.starting_now(limits.step_budget_seconds, store.clock)
    ctx = StepContext("run1", "charts", "tok-1", ports, store.clock, limits, budget, get_logger())
    with pytest.raises(FinalizeFailed):
        finalize(ctx, StepFinal(StepStatus.SUCCEEDED, store.clock.now()))


AT_THE_END = F - 1e-9  # the last call starts when the budget ends, give or take float rounding


@pytest.mark.parametrize(
    ("slow_from", "refuse", "elapsed"),
    [
        (float("inf"), False, F),  # an outage answered at once: retried to the budget's end
        (0.0, False, CALL),  # the first call already outlasts the budget: no second one
        (AT_THE_END, False, WORST),  # fast failures until F, then the slowest call: the bound
        (AT_THE_END, True, WORST_REFUSED),  # ... and that call refused the result: one more
    ],
    ids=["fast-outage", "slow-from-the-start", "slow-at-the-end", "refused-at-the-end"],
)
def test_a_failing_finalize_ends_within_the_stated_worst_case(
    slow_from: float, refuse: bool, elapsed: float
) -> None:
    clock = FakeClock()
    store = FailingStore(clock, slow_from, refuse)
    finalize_against(store)
    assert clock.elapsed == pytest.approx(elapsed)
    assert clock.elapsed <= (WORST_REFUSED if refuse else WORST) + 1e-9
    assert sum(clock.sleeps) <= F + 1e-9  # no sleep runs past the budget
    if slow_from == float("inf"):
        assert store.calls > 5 and clock.sleeps[-1] < FINALIZE.cap  # the last wait cut short
