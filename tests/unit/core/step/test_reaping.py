"""core/step/reaping.py: what the reaper does with one expired lease, from the lease and the run as
they are now. The reaper over a store: tests/unit/service/test_reaper.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker_chart_export.core.step.reaping import (
    ExpiredLease,
    LeaseFate,
    ReapDecision,
    ReapPlan,
    ReapReport,
    decide_reap,
    lease_document,
)
from worker_chart_export.core.step.step_rules import ClaimPlan, plan_claim

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LEASE_AT = "2026-11-23T12:00:00.000Z"
LEASE = ExpiredLease("doc1", "run1", "charts", "mine", LEASE_AT)


def lease_now(token: str = "mine") -> dict[str, Any]:
    return {"runId": "run1", "stepId": "charts", "claimToken": token, "expiresAt": LEASE_AT}


def run_now(**step: Any) -> dict[str, Any]:
    return {"steps": {"charts": {"stepType": "CHART_EXPORT", **step}}}


def decide(
    lease_doc: dict[str, Any] | None, run: dict[str, Any] | None, max_attempts: int = 3
) -> ReapDecision:
    return decide_reap(LEASE, lease_doc, run, now=NOW, max_attempts=max_attempts)


def running(attempt: int = 1, lease: str = LEASE_AT, token: str = "mine") -> dict[str, Any]:
    return run_now(status="RUNNING", claimToken=token, attempt=attempt, leaseExpiresAt=lease)


def test_an_expired_lease_below_the_maximum_is_retried_and_deleted() -> None:
    decision = decide(lease_now(), running(attempt=2))
    assert decision == ReapDecision(
        LeaseFate.RETRIED,
        ReapPlan("charts", {"status": "READY"}, ("claimToken", "leaseExpiresAt"), retried=True),
        delete_lease=True,
    )


def test_an_expired_lease_at_the_maximum_fails_the_step() -> None:
    decision = decide(lease_now(), running(attempt=3))
    assert decision.outcome is LeaseFate.FAILED and decision.delete_lease
    assert decision.plan is not None and decision.plan.set_fields["status"] == "FAILED"
    assert decide(lease_now(), running(attempt=3), max_attempts=4).outcome is LeaseFate.RETRIED


def test_a_lease_renewed_or_still_valid_is_left_alone() -> None:
    valid = running(lease="2026-11-23T12:00:00.001Z")
    assert decide(lease_now(), valid) == ReapDecision(LeaseFate.NOT_EXPIRED)


@pytest.mark.parametrize("lease_doc", [None, lease_now(token="theirs")], ids=["finalized", "claimed-again"])
def test_a_lease_gone_or_taken_by_another_claim_is_superseded(lease_doc: dict[str, Any] | None) -> None:
    # the run is not even looked at: the lease is no longer this claim's
    assert decide(lease_doc, running()) == ReapDecision(LeaseFate.SUPERSEDED)


@pytest.mark.parametrize(
    "run",
    [
        None,
        {"steps": {}},
        run_now(status="SUCCEEDED", claimToken="mine", leaseExpiresAt=LEASE_AT),
        running(token="theirs"),
    ],
    ids=["run-gone", "step-gone", "finished", "claimed-again"],
)
def test_a_stray_lease_of_a_step_finished_or_gone_is_cleared(run: dict[str, Any] | None) -> None:
    assert decide(lease_now(), run) == ReapDecision(LeaseFate.CLEARED, delete_lease=True)


def test_a_lease_document_is_read_back_only_when_complete() -> None:
    data = {**lease_now(), "attempt": 1}
    assert ExpiredLease.from_document("doc1", data) == LEASE
    for name in ("runId", "stepId", "claimToken", "expiresAt"):
        assert ExpiredLease.from_document("doc1", {**data, name: ""}) is None, name
        assert ExpiredLease.from_document("doc1", {**data, name: 7}) is None, name
        assert ExpiredLease.from_document("doc1", {k: v for k, v in data.items() if k != name}) is None, name
    assert ExpiredLease.from_document("doc1", None) is None


def test_the_lease_a_claim_writes_holds_what_the_reaper_needs() -> None:
    document = {"steps": {"charts": {"stepType": "CHART_EXPORT", "status": "READY", "attempt": 1}}}
    plan = plan_claim(
        document, "run1", "charts", token="mine", now=NOW, lease_expires_at=NOW + timedelta(minutes=5)
    )
    assert isinstance(plan, ClaimPlan)
    written = lease_document("run1", plan)
    assert written == {
        "runId": "run1",
        "stepId": "charts",
        "claimToken": "mine",
        "expiresAt": "2026-11-23T12:05:00.000Z",
        "attempt": 2,
    }
    assert ExpiredLease.from_document("doc1", written) == ExpiredLease(
        "doc1", "run1", "charts", "mine", "2026-11-23T12:05:00.000Z"
    )


def test_a_report_counts_each_outcome_and_names_the_steps() -> None:
    report = ReapReport()
    other = ExpiredLease("doc2", "run2", "charts", "t", LEASE_AT)
    report.add(LeaseFate.RETRIED, LEASE)
    report.add(LeaseFate.RETRIED, other)
    report.add(LeaseFate.FAILED, other)
    report.add(LeaseFate.CLEARED, LEASE)
    report.errors.append("run3/charts: store unavailable")
    assert report.count(LeaseFate.RETRIED) == 2 and report.count(LeaseFate.NOT_EXPIRED) == 0
    assert report.to_summary() == {
        "retried": ["run1/charts", "run2/charts"],
        "failed": ["run2/charts"],
        "counts": {"cleared": 1, "failed": 1, "retried": 2},
        "errors": ["run3/charts: store unavailable"],
    }
    assert ReapReport().to_summary() == {"retried": [], "failed": [], "counts": {}, "errors": []}
