"""The in-memory flow_runs and step_leases: the lease documents they keep are the ones the
Firestore adapters write (tests/integration/test_leases_and_advance.py checks those)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harness.builders import chart_step, flow_run
from worker_chart_export.core.naming import lease_document_id
from worker_chart_export.core.types import ClaimStatus, StepFinal, StepStatus
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

NOW = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def test_a_claim_writes_its_lease_and_the_finalize_removes_it() -> None:
    store = InMemoryFlowRuns({"run1": flow_run({"charts": chart_step()})})
    claimed = store.claim_step("run1", "charts", token="tok-1", now=NOW, lease_expires_at=NOW + LEASE)
    assert claimed.status is ClaimStatus.CLAIMED and store.claim_is_current("run1", "charts", "tok-1")
    assert store.leases == {
        lease_document_id("run1", "charts"): {
            "runId": "run1",
            "stepId": "charts",
            "claimToken": "tok-1",
            "expiresAt": "2026-11-22T04:05:00.000Z",
            "attempt": 1,
        }
    }
    final = StepFinal(StepStatus.SUCCEEDED, NOW + timedelta(seconds=30), outputs={"o": 1})
    assert not store.finalize_step("run1", "charts", token="tok-other", final=final).written
    assert store.lease_of("run1", "charts") is not None  # not ours: nothing written
    assert store.finalize_step("run1", "charts", token="tok-1", final=final).written
    assert store.leases == {} and store.runs["run1"]["steps"]["charts"]["status"] == "SUCCEEDED"


def test_a_refused_claim_writes_no_lease() -> None:
    store = InMemoryFlowRuns({"run1": flow_run({"charts": chart_step(status="SUCCEEDED")})})
    refused = store.claim_step("run1", "charts", token="t", now=NOW, lease_expires_at=NOW + LEASE)
    missing = store.claim_step("nope", "charts", token="t", now=NOW, lease_expires_at=NOW + LEASE)
    assert (refused.status, missing.status) == (ClaimStatus.CONFLICT, ClaimStatus.NOT_FOUND)
    assert store.leases == {}


def test_expired_leases_are_listed_soonest_first_and_malformed_ones_skipped() -> None:
    runs = {f"run{i}": flow_run({"charts": chart_step()}, run_id=f"run{i}") for i in range(3)}
    store = InMemoryFlowRuns(runs)
    for i, minutes in enumerate((4, 1, 10)):
        at = NOW + timedelta(minutes=minutes)
        store.claim_step(f"run{i}", "charts", token=f"t{i}", now=NOW, lease_expires_at=at)
    store.leases["hand-written"] = {"runId": "run9", "expiresAt": "2026-11-22T04:00:00.000Z"}

    found = store.expired_leases(NOW + timedelta(minutes=5), 10)

    assert [(lease.run_id, lease.token) for lease in found] == [("run1", "t1"), ("run0", "t0")]
    assert [lease.run_id for lease in store.expired_leases(NOW + timedelta(minutes=5), 2)] == ["run1"]


def test_the_documents_given_are_copied_not_shared() -> None:
    document = flow_run({"charts": chart_step()})
    store = InMemoryFlowRuns({"run1": document})
    store.claim_step("run1", "charts", token="t", now=NOW, lease_expires_at=NOW + LEASE)
    assert document["steps"]["charts"]["status"] == "READY"
