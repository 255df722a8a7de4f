"""reap_once over the in-memory flow_runs and step_leases (testing/flow_runs.py): the reaper's
rules without an emulator. tests/integration/test_leases_and_advance.py runs the same cases
on Firestore, where a reap is a compare-and-set that can lose to another write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness.builders import chart_step, flow_run
from harness.logs import LogCapture
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.naming import lease_document_id
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate, ReapReport
from worker_chart_export.core.types import ClaimStatus, StepFinal, StepStatus
from worker_chart_export.service.reaper import reap_once
from worker_chart_export.testing import FakeClock
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

RUN, STEP = "run1", "charts"
NOW = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)
EXPIRED = NOW + LEASE + timedelta(seconds=1)


def store_with(*run_ids: str, **step: Any) -> InMemoryFlowRuns:
    return InMemoryFlowRuns(
        {run_id: flow_run({STEP: chart_step(**step)}, run_id=run_id) for run_id in run_ids}
    )


def claim(store: InMemoryFlowRuns, token: str, run_id: str = RUN, lease: timedelta = LEASE) -> None:
    outcome = store.claim_step(run_id, STEP, token=token, now=NOW, lease_expires_at=NOW + lease)
    assert outcome.status is ClaimStatus.CLAIMED, outcome.reason


def reap_at(reaper: Any, moment: datetime, **options: Any) -> ReapReport:
    return reap_once(reaper, clock=FakeClock(moment), **options)


def step_of(store: InMemoryFlowRuns, run_id: str = RUN) -> dict[str, Any]:
    return dict(store.runs[run_id]["steps"][STEP])


class Meanwhile:
    """The reaper's port with `event` happening between the listing and the reaps: another
    writer (a finalize, a new claim) landing while the reaper works."""

    def __init__(self, inner: InMemoryFlowRuns, event: Callable[[], object]) -> None:
        self.inner = inner
        self.event = event

    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]:
        found = self.inner.expired_leases(now, limit)
        self.event()
        return found

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate:
        return self.inner.reap(lease, now=now, max_attempts=max_attempts)


class UnavailableFor:
    """The reaper's port failing as a store outage would: listing, or reaping some runs."""

    def __init__(self, inner: InMemoryFlowRuns, run_ids: set[str], *, listing: bool = False) -> None:
        self.inner = inner
        self.run_ids = run_ids
        self.listing = listing

    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]:
        if self.listing:
            raise TransientStoreError("query of expired step_leases: 503 Service Unavailable")
        return self.inner.expired_leases(now, limit)

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate:
        if lease.run_id in self.run_ids:
            raise TransientStoreError(f"reap of step {lease.step_id}: 503 Service Unavailable")
        return self.inner.reap(lease, now=now, max_attempts=max_attempts)


def test_an_expired_lease_makes_the_step_ready_again_with_its_attempt(log_capture: LogCapture) -> None:
    store = store_with(RUN)
    claim(store, "tok-dead")

    assert reap_at(store, NOW + LEASE - timedelta(seconds=1)).outcomes == {}
    assert step_of(store)["status"] == "RUNNING"  # the lease is still valid: untouched

    report = reap_at(store, EXPIRED)
    assert report.outcomes == {LeaseFate.RETRIED: [f"{RUN}/{STEP}"]} and report.errors == []
    step = step_of(store)
    assert (step["status"], step["attempt"]) == ("READY", 1)
    assert "claimToken" not in step and "leaseExpiresAt" not in step and "error" not in step
    assert store.leases == {}
    [line] = log_capture.events("step lease expired: READY again")
    assert (line["runId"], line["stepId"], line["severity"]) == (RUN, STEP, "WARNING")
    assert line["leaseExpiresAt"] == "2026-11-22T04:05:00.000Z"  # when the dead execution's lease ended
    # the dead execution's late finalize is refused
    late = store.finalize_step(RUN, STEP, token="tok-dead", final=StepFinal(StepStatus.SUCCEEDED, EXPIRED))
    assert not late.written and step_of(store)["status"] == "READY"


def test_the_last_attempt_fails_with_step_lease_expired(log_capture: LogCapture) -> None:
    store = store_with(RUN, attempt=2)
    claim(store, "tok-3")  # attempt 3 of 3

    report = reap_at(store, EXPIRED, max_attempts=3)

    assert report.count(LeaseFate.FAILED) == 1 and report.count(LeaseFate.RETRIED) == 0
    step = step_of(store)
    assert (step["status"], step["attempt"]) == ("FAILED", 3)
    assert step["finishedAt"] == "2026-11-22T04:05:01.000Z" and "leaseExpiresAt" not in step
    assert step["error"]["code"] == "STEP_LEASE_EXPIRED"
    assert step["error"]["details"] == {
        "attempt": 3,
        "maxAttempts": 3,
        "leaseExpiresAt": "2026-11-22T04:05:00.000Z",
    }
    assert store.leases == {}
    [line] = log_capture.events("step lease expired: FAILED")
    assert (line["runId"], line["stepId"], line["leaseExpiresAt"]) == (RUN, STEP, "2026-11-22T04:05:00.000Z")
    assert line["severity"] == "ERROR"
    assert line["error"] == {"code": "STEP_LEASE_EXPIRED"} and line["maxAttempts"] == 3


@pytest.mark.parametrize(("attempt", "max_attempts", "status"), [(1, 2, "READY"), (2, 2, "FAILED")])
def test_max_attempts_is_the_reapers_to_choose(attempt: int, max_attempts: int, status: str) -> None:
    store = store_with(RUN, attempt=attempt - 1)
    claim(store, "tok")
    reap_at(store, EXPIRED, max_attempts=max_attempts)
    assert step_of(store)["status"] == status and step_of(store)["attempt"] == attempt


def test_a_step_finished_meanwhile_is_left_finished(log_capture: LogCapture) -> None:
    store = store_with(RUN)
    claim(store, "tok-late")
    final = StepFinal(StepStatus.SUCCEEDED, NOW + LEASE, outputs={"o": 1})
    finishing = Meanwhile(store, lambda: store.finalize_step(RUN, STEP, token="tok-late", final=final))

    report = reap_at(finishing, EXPIRED)

    # the finalize deleted the lease the reaper had listed
    assert report.outcomes == {LeaseFate.SUPERSEDED: [f"{RUN}/{STEP}"]}
    step = step_of(store)
    assert step["status"] == "SUCCEEDED" and step["outputs"] == {"o": 1} and "error" not in step
    [line] = log_capture.events("lease left alone")
    assert (line["runId"], line["stepId"], line["outcome"]) == (RUN, STEP, "SUPERSEDED")
    assert (line["severity"], line["leaseExpiresAt"]) == ("INFO", "2026-11-22T04:05:00.000Z")


def test_a_step_claimed_again_meanwhile_keeps_its_new_claim_and_lease() -> None:
    store = store_with(RUN)
    claim(store, "tok-old")
    [old] = store.expired_leases(EXPIRED, 10)
    assert reap_at(store, EXPIRED).count(LeaseFate.RETRIED) == 1  # another pass got there first
    claim(store, "tok-new")

    assert store.reap(old, now=EXPIRED, max_attempts=3) is LeaseFate.SUPERSEDED

    step = step_of(store)
    assert (step["status"], step["claimToken"], step["attempt"]) == ("RUNNING", "tok-new", 2)
    assert (store.lease_of(RUN, STEP) or {}).get("claimToken") == "tok-new"


def test_a_stray_lease_of_a_finished_step_is_cleared_and_the_step_untouched() -> None:
    store = store_with(RUN)
    claim(store, "tok-old")
    stray = dict(store.lease_of(RUN, STEP) or {})
    assert store.finalize_step(RUN, STEP, token="tok-old", final=StepFinal(StepStatus.FAILED, NOW)).written
    assert store.lease_of(RUN, STEP) is None  # the finalize deleted it; put back by hand:
    store.leases[lease_document_id(RUN, STEP)] = stray
    before = step_of(store)

    assert reap_at(store, EXPIRED).outcomes == {LeaseFate.CLEARED: [f"{RUN}/{STEP}"]}
    assert step_of(store) == before and store.leases == {}


def test_a_lease_renewed_in_the_run_is_not_expired_and_nothing_is_written() -> None:
    store = store_with(RUN)
    claim(store, "tok")
    store.runs[RUN]["steps"][STEP]["leaseExpiresAt"] = "2026-11-22T05:00:00.000Z"  # renewed by the run
    before = (step_of(store), dict(store.leases))

    assert reap_at(store, EXPIRED).outcomes == {LeaseFate.NOT_EXPIRED: [f"{RUN}/{STEP}"]}
    assert (step_of(store), dict(store.leases)) == before


def test_a_lease_that_cannot_be_reaped_is_counted_and_the_pass_goes_on(log_capture: LogCapture) -> None:
    store = store_with("run_a", "run_b")
    claim(store, "tok-a", "run_a", lease=LEASE - timedelta(minutes=1))  # expired first: listed first
    claim(store, "tok-b", "run_b")
    assert [lease.run_id for lease in store.expired_leases(EXPIRED, 10)] == ["run_a", "run_b"]

    report = reap_at(UnavailableFor(store, {"run_a"}), EXPIRED)

    assert report.outcomes == {LeaseFate.RETRIED: [f"run_b/{STEP}"]}
    assert report.errors == [f"run_a/{STEP}: reap of step {STEP}: 503 Service Unavailable"]
    assert report.to_summary()["errors"] == report.errors
    assert step_of(store, "run_a")["status"] == "RUNNING" and store.lease_of("run_a", STEP) is not None
    assert step_of(store, "run_b")["status"] == "READY"
    [failed] = log_capture.events("reap failed")
    assert (failed["runId"], failed["stepId"], failed["severity"]) == ("run_a", STEP, "WARNING")
    assert failed["reason"] == f"reap of step {STEP}: 503 Service Unavailable"
    [finished] = log_capture.events("reaper pass finished")
    assert finished["errors"] == report.errors and finished["counts"] == {"retried": 1}


def test_leases_that_cannot_even_be_listed_fail_the_pass() -> None:
    store = store_with(RUN)
    claim(store, "tok")
    with pytest.raises(TransientStoreError, match="expired step_leases"):
        reap_at(UnavailableFor(store, set(), listing=True), EXPIRED)
    assert step_of(store)["status"] == "RUNNING"


def test_a_pass_takes_at_most_its_batch_soonest_first() -> None:
    store = store_with("run0", "run1", "run2")
    for i, minutes in enumerate((3, 1, 2)):
        claim(store, f"t{i}", f"run{i}", lease=timedelta(minutes=minutes))

    first = reap_at(store, EXPIRED, batch=2)
    assert first.outcomes == {LeaseFate.RETRIED: [f"run1/{STEP}", f"run2/{STEP}"]}
    assert step_of(store, "run0")["status"] == "RUNNING"
    assert reap_at(store, EXPIRED, batch=2).outcomes == {LeaseFate.RETRIED: [f"run0/{STEP}"]}
