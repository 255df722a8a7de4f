"""core/step_rules.py: the rules the stores and the fence share."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

from tenacity import RetryCallState

from worker_chart_export.adapters.firestore.client import DEFAULT_RPC_TIMEOUT_SECONDS
from worker_chart_export.core import step_rules
from worker_chart_export.core.step_rules import (
    CLAIM_TRIES,
    LEASE_SAFETY_MARGIN,
    ClaimPlan,
    claim_retry_wait,
    lease_surely_held,
    plan_claim,
    settled_claim,
)
from worker_chart_export.core.types import ClaimOutcome, ClaimStatus

LEASE_END = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def test_a_lease_is_surely_held_until_the_margin_before_its_end() -> None:
    last_sure_moment = LEASE_END - LEASE_SAFETY_MARGIN - timedelta(microseconds=1)
    assert lease_surely_held(LEASE_END, LEASE_END - timedelta(minutes=9))
    assert lease_surely_held(LEASE_END, last_sure_moment)
    assert not lease_surely_held(LEASE_END, LEASE_END - LEASE_SAFETY_MARGIN)  # from here: ask the store
    assert not lease_surely_held(LEASE_END, LEASE_END + timedelta(seconds=1))


def test_the_margin_can_be_chosen() -> None:
    now = LEASE_END - timedelta(seconds=10)
    assert lease_surely_held(LEASE_END, now, margin=timedelta(seconds=5))
    assert not lease_surely_held(LEASE_END, now, margin=timedelta(seconds=15))


# --- the claim: planned from one version, settled by the version read after a lost commit ---

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
STEP = "charts"


def run_with(**step: Any) -> dict[str, Any]:
    return {
        "runId": "run1",
        "steps": {STEP: {"stepType": "CHART_EXPORT", **step}, "other": {"status": "PENDING"}},
    }


def settled(document: dict[str, Any] | None, token: str = "mine") -> ClaimOutcome | None:
    return settled_claim(document, "run1", STEP, token=token, now=NOW, lease_expires_at=LEASE_END)


def test_a_claim_plan_writes_only_the_step_and_returns_the_claimed_document() -> None:
    document = run_with(status="READY", attempt=1, error={"code": "X"})
    plan = plan_claim(document, "run1", STEP, token="mine", now=NOW, lease_expires_at=LEASE_END)
    assert isinstance(plan, ClaimPlan)
    assert plan.set_fields["status"] == "RUNNING" and plan.set_fields["attempt"] == 2
    assert plan.delete_fields == ("error",)
    assert plan.claimed_document["steps"]["other"] == document["steps"]["other"]
    assert "error" not in plan.claimed_document["steps"][STEP]
    assert document["steps"][STEP]["error"] == {"code": "X"}  # the version planned from is untouched


def test_a_lost_commit_is_settled_by_what_the_read_shows() -> None:
    # RUNNING under our token: our commit landed although its answer was lost
    ours = settled(run_with(status="RUNNING", claimToken="mine", attempt=1))
    assert ours is not None and ours.status is ClaimStatus.CLAIMED and ours.claim is not None
    assert ours.claim.token == "mine" and ours.claim.attempt == 1
    # someone else won: the no-op, at once
    theirs = settled(run_with(status="RUNNING", claimToken="theirs", attempt=1))
    assert theirs is not None and theirs.status is ClaimStatus.CONFLICT
    assert "RUNNING" in theirs.reason and "lost the claim race" in theirs.reason
    finished = settled(run_with(status="SUCCEEDED", claimToken="theirs"))
    assert finished is not None and finished.status is ClaimStatus.CONFLICT
    gone = settled(None)
    assert gone is not None and gone.status is ClaimStatus.NOT_FOUND
    # still READY: another write of the run came first, so the claim is to be tried again
    assert settled(run_with(status="READY")) is None


def test_claim_retries_wait_100_to_500_ms_with_jitter() -> None:
    wait = claim_retry_wait()
    for attempt in range(1, CLAIM_TRIES):
        state = RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        waits = [wait(state) for _ in range(200)]
        assert all(0.1 <= w <= 0.5 for w in waits), (attempt, min(waits), max(waits))
        assert len(set(waits)) > 1  # jittered: contenders that lost together spread out
    assert 3 <= CLAIM_TRIES - 1 <= 5  # the error model's 3-5 retries


def test_the_claims_worst_case_is_stated_from_the_constants() -> None:
    longest_wait = claim_retry_wait().max
    sleeps = (CLAIM_TRIES - 1) * longest_wait
    rpcs = 1 + 2 * CLAIM_TRIES  # a first read, then a commit and a read per try
    rpc = 2 * DEFAULT_RPC_TIMEOUT_SECONDS  # api_core: T, and T again from T's last second
    source = inspect.getsource(step_rules)
    assert f"{CLAIM_TRIES - 1} x {longest_wait:g} = {sleeps:g} s of sleep" in source
    assert f"1 + 2 x {CLAIM_TRIES} = {rpcs} RPCs" in source and f"2T = {rpc:g} s" in source
    assert f"T = DEFAULT_RPC_TIMEOUT_SECONDS = {DEFAULT_RPC_TIMEOUT_SECONDS:g} s" in source
    assert f"Worst: {sleeps:g} + {rpcs} x {rpc:g} = {sleeps + rpcs * rpc:g} s" in source
