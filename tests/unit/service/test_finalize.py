"""finalize: a claimed step's result recorded on the in-memory flow_runs (testing/flow_runs.py),
by what it returns, raises, logs and writes; time is a FakeClock, so retries never sleep."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness.builders import chart_step, flow_run
from harness.logs import LogCapture, picked
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import FinalizeFailed, TransientStoreError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.types import FinalizeResult, StepFinal, StepStatus
from worker_chart_export.logs import get_logger
from worker_chart_export.service.finalize import finalize
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.step_context import StepContext
from worker_chart_export.testing import FakeClock
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

RUN, STEP, TOKEN = "run1", "charts", "tok-1"
START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
MANIFEST = {"outputsManifestGcsUri": "gs://bkt/charts/run1/charts/manifest.json"}


class NotUsed:
    """A port finalize must not touch."""

    mode = "mock"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"finalize used {name}")


def claimed_store() -> InMemoryFlowRuns:
    store = InMemoryFlowRuns({RUN: flow_run({STEP: chart_step()})})
    store.claim_step(RUN, STEP, token=TOKEN, now=START, lease_expires_at=START + timedelta(minutes=5))
    return store


def context(
    flow_runs: Any, clock: FakeClock, budget_seconds: float = 30.0, token: str = TOKEN
) -> StepContext:
    """The claimed step's context: only its flow_runs port and its finalize budget matter."""
    limits = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=budget_seconds)
    ports = Ports(flow_runs=flow_runs, templates=NotUsed(), artifacts=NotUsed(), chart_api=NotUsed())
    budget = Budget.starting_now(limits.step_budget_seconds, clock)
    return StepContext(RUN, STEP, token, ports, clock, limits, budget, get_logger())


def succeeded(clock: FakeClock) -> StepFinal:
    return StepFinal(StepStatus.SUCCEEDED, clock.now(), outputs=MANIFEST)


def step_of(store: InMemoryFlowRuns) -> dict[str, Any]:
    return dict(store.runs[RUN]["steps"][STEP])


@dataclass
class Down:
    """The flow_runs store unavailable for the first `seconds` of the clock's time (forever:
    math.inf), then itself again; every finalize it was asked for is counted."""

    inner: InMemoryFlowRuns
    clock: FakeClock
    seconds: float
    calls: int = 0

    def __post_init__(self) -> None:
        self.back_at = self.clock.monotonic() + self.seconds

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        self.calls += 1
        if self.clock.monotonic() < self.back_at:
            raise TransientStoreError("finalize: 503 Service Unavailable")
        return self.inner.finalize_step(run_id, step_id, token=token, final=final)


@dataclass
class Refusing:
    """Refuses the first `refusals` results as Firestore refuses a document grown too large."""

    inner: InMemoryFlowRuns
    refusals: int
    finals: list[StepFinal] = field(default_factory=list)

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        self.finals.append(final)
        if len(self.finals) <= self.refusals:
            raise ValueError("400 maximum entity size is 1048576 bytes")
        return self.inner.finalize_step(run_id, step_id, token=token, final=final)


def test_the_result_is_written_once_and_the_lease_goes_with_it() -> None:
    store, clock = claimed_store(), FakeClock(START)
    clock.advance(42)
    assert finalize(context(store, clock), succeeded(clock)) is True
    step = step_of(store)
    assert (step["status"], step["finishedAt"], step["outputs"]) == (
        "SUCCEEDED",
        "2026-11-22T10:00:42.000Z",
        MANIFEST,
    )
    assert step["claimToken"] == TOKEN and "error" not in step
    assert store.lease_of(RUN, STEP) is None and clock.sleeps == []


def test_a_failure_is_written_with_its_error() -> None:
    store, clock = claimed_store(), FakeClock(START)
    error = StepError(ErrorCode.VALIDATION_FAILED, "inputs.requests is empty")
    assert finalize(context(store, clock), StepFinal(StepStatus.FAILED, clock.now(), error=error))
    step = step_of(store)
    assert step["status"] == "FAILED" and step["error"]["code"] == "VALIDATION_FAILED"
    assert step["error"]["message"] == "inputs.requests is empty"


def test_a_step_no_longer_ours_is_left_as_it_is(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    before = step_of(store)
    assert finalize(context(store, clock, token="tok-stale"), succeeded(clock)) is False
    assert step_of(store) == before and store.lease_of(RUN, STEP) is not None
    [line] = log_capture.events("finalize skipped: no-op")
    assert line["code"] == "STEP_FINALIZE_CONFLICT" and "another execution" in line["reason"]


def test_a_step_finalized_already_is_not_written_again() -> None:
    store, clock = claimed_store(), FakeClock(START)
    assert finalize(context(store, clock), succeeded(clock))
    clock.advance(5)
    failed = StepFinal(StepStatus.FAILED, clock.now(), error=StepError(ErrorCode.CHART_API_FAILED, "late"))
    assert finalize(context(store, clock), failed) is False
    assert step_of(store)["status"] == "SUCCEEDED"


def test_a_store_that_fails_then_recovers_is_retried(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    down = Down(store, clock, seconds=3.0)
    assert finalize(context(down, clock), succeeded(clock)) is True
    assert down.calls > 1 and step_of(store)["status"] == "SUCCEEDED"
    assert clock.sleeps and 3.0 <= clock.elapsed < 30.0  # waited the outage out, within the budget
    retries = log_capture.events("finalize retrying")
    assert [line["attempt"] for line in retries] == list(range(1, down.calls))  # the attempts that failed
    assert all(line["severity"] == "WARNING" and "503" in line["reason"] for line in retries)


@dataclass
class Blipping:
    """The flow_runs store unavailable for its first `blips` finalize calls, then itself."""

    inner: InMemoryFlowRuns
    blips: int
    calls: int = 0

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        self.calls += 1
        if self.calls <= self.blips:
            raise TransientStoreError(f"finalize: 503 Service Unavailable (call {self.calls})")
        return self.inner.finalize_step(run_id, step_id, token=token, final=final)


def test_each_retry_waits_on_the_steps_clock_and_is_named_in_the_log(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    blipping = Blipping(store, blips=2)
    assert finalize(context(blipping, clock), succeeded(clock)) is True
    assert blipping.calls == 3 and step_of(store)["status"] == "SUCCEEDED"
    # FINALIZE_WAIT: 0.2 s doubling, plus up to 1 s of jitter, slept on the injected clock
    [first, second] = clock.sleeps
    assert 0.2 <= first <= 1.2 and 0.4 <= second <= 1.4 and clock.elapsed == first + second
    retries = log_capture.events("finalize retrying")
    assert [picked(line, "severity", "attempt", "reason") for line in retries] == [
        {"severity": "WARNING", "attempt": 1, "reason": "finalize: 503 Service Unavailable (call 1)"},
        {"severity": "WARNING", "attempt": 2, "reason": "finalize: 503 Service Unavailable (call 2)"},
    ]


@pytest.mark.parametrize(
    ("budget_seconds", "outage_seconds", "recorded"),
    [(30.0, 10.0, True), (2.0, 10.0, False), (2.0, math.inf, False), (30.0, math.inf, False)],
)
def test_the_budget_decides_how_long_an_outage_is_waited_out(
    budget_seconds: float, outage_seconds: float, recorded: bool
) -> None:
    store, clock = claimed_store(), FakeClock(START)
    down = Down(store, clock, seconds=outage_seconds)
    ctx = context(down, clock, budget_seconds=budget_seconds)
    if recorded:
        assert finalize(ctx, succeeded(clock)) is True
        assert step_of(store)["status"] == "SUCCEEDED"
        return
    with pytest.raises(FinalizeFailed, match=f"could not be finalized within {budget_seconds:.0f}s"):
        finalize(ctx, succeeded(clock))
    assert down.calls > 1 and clock.elapsed >= budget_seconds / 2  # retried, not given up at once
    assert step_of(store)["status"] == "RUNNING" and store.lease_of(RUN, STEP) is not None


def test_a_finalize_that_fails_says_what_it_meant_to_write(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    with pytest.raises(FinalizeFailed, match="503 Service Unavailable"):
        finalize(context(Down(store, clock, seconds=math.inf), clock, budget_seconds=2.0), succeeded(clock))
    [line] = log_capture.events("finalize failed")
    assert line["severity"] == "ERROR" and line["intendedStatus"] == "SUCCEEDED"
    assert line["error"]["code"] == "FIRESTORE_FINALIZE_FAILED" and "503" in line["error"]["message"]


def test_a_result_the_store_refuses_is_replaced_by_a_bare_failure(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    refusing = Refusing(store, refusals=1)
    assert finalize(context(refusing, clock), succeeded(clock)) is True
    assert [final.status for final in refusing.finals] == [StepStatus.SUCCEEDED, StepStatus.FAILED]
    step = step_of(store)
    assert step["status"] == "FAILED" and step["error"]["code"] == "FIRESTORE_FINALIZE_FAILED"
    assert (
        "(SUCCEEDED) could not be recorded: ValueError: 400 maximum entity size" in step["error"]["message"]
    )
    assert "outputs" not in step  # the refused result's outputs are not part of the bare failure
    [line] = log_capture.events("finalize refused: recording a bare failure instead")
    assert line["severity"] == "ERROR" and line["intendedStatus"] == "SUCCEEDED"


def test_a_store_refusing_even_the_bare_failure_fails_loudly(log_capture: LogCapture) -> None:
    store, clock = claimed_store(), FakeClock(START)
    refusing = Refusing(store, refusals=2)
    with pytest.raises(FinalizeFailed, match="could not be finalized: ValueError: 400 maximum entity size"):
        finalize(context(refusing, clock), succeeded(clock))
    assert len(refusing.finals) == 2 and step_of(store)["status"] == "RUNNING"
    assert log_capture.events("finalize failed")[0]["severity"] == "ERROR"
