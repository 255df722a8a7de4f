"""core/step/step_rules.py: the rules the stores and the fence share, each with the boundaries the
contract names (attempt at the maximum, a lease expiring exactly now, a token from another
claim, a step finished meanwhile). The stores that execute them: tests/unit/adapters/test_memory.py,
tests/unit/service/test_reaper.py and test_finalize.py, and on Firestore tests/integration/."""

from __future__ import annotations

import copy
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tenacity import RetryCallState

from worker_chart_export.adapters.firestore.client import DEFAULT_RPC_TIMEOUT_SECONDS
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.retry import CLAIM_COMMITS
from worker_chart_export.core.step import step_rules
from worker_chart_export.core.step.reaping import ReapPlan, plan_reap
from worker_chart_export.core.step.step_rules import (
    LEASE_SAFETY_MARGIN,
    ClaimPlan,
    FinalizePlan,
    apply_to_step,
    attempt_of,
    claim_is_current,
    claim_retry_wait,
    confirmed_claim,
    finalized,
    is_ready_chart_export,
    lease_surely_held,
    plan_claim,
    plan_finalize,
    settled_claim,
    step_of,
)
from worker_chart_export.core.types import (
    Claim,
    ClaimResult,
    ClaimStatus,
    FinalizeResult,
    StepFinal,
    StepStatus,
)

CLAIM_TRIES = CLAIM_COMMITS.attempts or 1
NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)
LEASE_END = NOW + timedelta(minutes=10)
RUN = "run1"
STEP = "charts"
MANIFEST = {"outputsManifestGcsUri": "gs://b/charts/run1/charts/manifest.json"}


def run_with(**step: Any) -> dict[str, Any]:
    return {
        "runId": RUN,
        "status": "RUNNING",
        "steps": {STEP: {"stepType": "CHART_EXPORT", **step}, "other": {"status": "PENDING"}},
    }


def claim(document: dict[str, Any] | None, token: str = "mine") -> ClaimPlan | ClaimResult:
    return plan_claim(document, RUN, STEP, token=token, now=NOW, lease_expires_at=LEASE_END)


# --- reading a step ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [None, {}, {"steps": []}, {"steps": {"other": {}}}, {"steps": {STEP: "READY"}}, {"steps": {STEP: None}}],
    ids=["no-document", "no-steps", "steps-not-a-map", "no-such-step", "step-not-a-map", "step-null"],
)
def test_a_step_is_only_a_map_under_the_steps_map(document: Any) -> None:
    assert step_of(document, STEP) is None


def test_the_step_is_the_map_itself() -> None:
    document = run_with(status="READY")
    assert step_of(document, STEP) is document["steps"][STEP]


@pytest.mark.parametrize(
    ("step", "ready"),
    [
        ({"stepType": "CHART_EXPORT", "status": "READY"}, True),
        ({"stepType": "CHART_EXPORT", "status": "RUNNING"}, False),
        ({"stepType": "LLM_REPORT", "status": "READY"}, False),
        ({"status": "READY"}, False),
        ({"stepType": "CHART_EXPORT"}, False),
    ],
)
def test_only_a_ready_chart_export_step_is_ours_to_take(step: dict[str, Any], ready: bool) -> None:
    assert is_ready_chart_export(step) is ready


@pytest.mark.parametrize(
    ("attempt", "counted"),
    [(None, 0), (0, 0), (1, 1), (3, 3), (-1, 0), (True, 0), (False, 0), ("2", 0), (2.0, 0)],
)
def test_attempts_are_a_non_negative_integer_else_none(attempt: Any, counted: int) -> None:
    step = {} if attempt is None else {"attempt": attempt}
    assert attempt_of(step) == counted


# --- the claim ----------------------------------------------------------------------------


def test_a_claim_plan_writes_only_the_step_and_returns_the_claimed_document() -> None:
    document = run_with(status="READY", attempt=1, error={"code": "X"}, finishedAt="then", inputs={"a": 1})
    planned_from = copy.deepcopy(document)
    plan = claim(document)
    assert isinstance(plan, ClaimPlan)
    assert plan.step_id == STEP
    assert plan.set_fields == {
        "status": "RUNNING",
        "startedAt": "2026-11-23T12:00:00.000Z",
        "attempt": 2,
        "claimToken": "mine",
        "leaseExpiresAt": "2026-11-23T12:10:00.000Z",
    }
    assert plan.delete_fields == ("finishedAt", "error")
    assert plan.claim == Claim("mine", 2, LEASE_END)
    assert plan.claimed_document == {
        **planned_from,
        "steps": {
            STEP: {"stepType": "CHART_EXPORT", "inputs": {"a": 1}, **plan.set_fields},
            "other": {"status": "PENDING"},
        },
    }
    assert document == planned_from  # the version planned from is untouched


@pytest.mark.parametrize(("attempt", "next_attempt"), [(None, 1), (0, 1), (2, 3), (-4, 1), ("1", 1)])
def test_a_claim_counts_one_more_attempt(attempt: Any, next_attempt: int) -> None:
    step = {"status": "READY"} if attempt is None else {"status": "READY", "attempt": attempt}
    plan = claim(run_with(**step))
    assert isinstance(plan, ClaimPlan)
    assert plan.set_fields["attempt"] == plan.claim.attempt == next_attempt
    assert plan.delete_fields == ()


def test_a_claim_outcome_names_the_step_and_its_attempt() -> None:
    plan = claim(run_with(status="READY", attempt=2))
    assert isinstance(plan, ClaimPlan)
    outcome = plan.outcome("; after 1 retry")
    assert outcome == ClaimResult(
        ClaimStatus.CLAIMED,
        "step charts claimed (attempt 3; after 1 retry)",
        plan.claimed_document,
        plan.claim,
    )
    assert plan.outcome().reason == "step charts claimed (attempt 3)"


@pytest.mark.parametrize(
    ("document", "status", "reason"),
    [
        (None, ClaimStatus.NOT_FOUND, "flow_run run1 does not exist"),
        ({"runId": RUN, "steps": {}}, ClaimStatus.CONFLICT, "step charts does not exist"),
        (
            {"steps": {STEP: {"stepType": "LLM_REPORT", "status": "READY"}}},
            ClaimStatus.CONFLICT,
            "step charts is a LLM_REPORT step, not CHART_EXPORT",
        ),
        (run_with(status="PENDING"), ClaimStatus.CONFLICT, "step charts is PENDING, not READY"),
        (
            run_with(status="RUNNING", claimToken="theirs"),
            ClaimStatus.CONFLICT,
            "step charts is RUNNING, not READY",
        ),
        (run_with(status="SUCCEEDED"), ClaimStatus.CONFLICT, "step charts is SUCCEEDED, not READY"),
    ],
    ids=["run-gone", "step-gone", "other-type", "pending", "running", "finished"],
)
def test_a_claim_is_refused_with_the_reason(
    document: dict[str, Any] | None, status: ClaimStatus, reason: str
) -> None:
    assert claim(document) == ClaimResult(status, reason)


# --- a claim whose commit did not go through as planned ---------------------------------------


def settled(document: dict[str, Any] | None, token: str = "mine") -> ClaimResult | None:
    return settled_claim(document, RUN, STEP, token=token, now=NOW, lease_expires_at=LEASE_END)


def test_a_lost_commit_is_settled_by_what_the_read_shows() -> None:
    # RUNNING under our token: our commit landed although its answer was lost
    document = run_with(status="RUNNING", claimToken="mine", attempt=1)
    ours = settled(document)
    assert ours == ClaimResult(
        ClaimStatus.CLAIMED,
        "step charts claimed (attempt 1; commit confirmed by a re-read)",
        document,
        Claim("mine", 1, LEASE_END),
    )
    # someone else won: the no-op, at once
    theirs = settled(run_with(status="RUNNING", claimToken="theirs", attempt=1))
    assert theirs == ClaimResult(
        ClaimStatus.CONFLICT, "step charts is RUNNING, not READY (lost the claim race)"
    )
    finished = settled(run_with(status="SUCCEEDED", claimToken="mine"))  # ours, finished meanwhile
    assert finished == ClaimResult(
        ClaimStatus.CONFLICT, "step charts is SUCCEEDED, not READY (lost the claim race)"
    )
    gone = settled(None)
    assert gone == ClaimResult(ClaimStatus.NOT_FOUND, "flow_run run1 does not exist (lost the claim race)")
    # still READY: another write of the run came first, so the claim is to be tried again
    assert settled(run_with(status="READY")) is None


def test_a_confirmed_claim_is_ours_only_while_running_under_our_token() -> None:
    def confirmed(document: dict[str, Any] | None, token: str = "mine") -> ClaimResult | None:
        return confirmed_claim(document, STEP, token=token, now=NOW, lease_expires_at=LEASE_END)

    document = run_with(status="RUNNING", claimToken="mine", attempt=3)
    outcome = confirmed(document)
    assert outcome is not None and outcome.status is ClaimStatus.CLAIMED
    assert outcome.claim == Claim("mine", 3, LEASE_END)
    assert outcome.flow_run == document and outcome.flow_run is not document
    assert "attempt 3" in outcome.reason
    # an attempt the document does not say is counted as the first
    unnumbered = confirmed(run_with(status="RUNNING", claimToken="mine"))
    assert unnumbered is not None and unnumbered.claim is not None and unnumbered.claim.attempt == 1
    assert confirmed(run_with(status="RUNNING", claimToken="theirs")) is None
    assert confirmed(run_with(status="SUCCEEDED", claimToken="mine")) is None
    assert confirmed(run_with(status="READY", claimToken="mine")) is None
    assert confirmed(None) is None


def test_claim_retries_wait_100_to_500_ms_with_jitter() -> None:
    wait = claim_retry_wait()
    for attempt in range(1, CLAIM_TRIES):
        state = RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        waits = [wait(state) for _ in range(200)]
        assert all(0.1 <= w <= 0.5 for w in waits), (attempt, min(waits), max(waits))
        assert len(set(waits)) > 1  # jittered: contenders that lost together spread out
    assert 3 <= CLAIM_TRIES - 1 <= 5  # the error model's 3-5 retries


def test_the_first_claim_retries_wait_at_most_200_ms_then_up_to_400() -> None:
    """0.1-0.2 s, then 0.1-0.4 s (the window grows, so the first retry is quick)."""
    wait = claim_retry_wait()
    for attempt, ceiling in ((1, 0.2), (2, 0.4)):
        state = RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        waits = [wait(state) for _ in range(300)]
        assert max(waits) <= ceiling, (attempt, max(waits))
        assert max(waits) > ceiling - 0.05, (attempt, max(waits))  # the whole window is used


# --- finalize -----------------------------------------------------------------------------

SUCCEEDED = StepFinal(StepStatus.SUCCEEDED, NOW + timedelta(minutes=1), outputs=MANIFEST)
FAILURE = StepError(ErrorCode.CHART_API_FAILED, "every chart failed", {"failed": 2})
FAILED = StepFinal(StepStatus.FAILED, NOW + timedelta(minutes=1), error=FAILURE)


def finalize(
    document: dict[str, Any] | None, final: StepFinal = SUCCEEDED, token: str = "mine"
) -> FinalizePlan | FinalizeResult:
    return plan_finalize(document, RUN, STEP, token=token, final=final)


def test_a_success_sets_status_time_and_outputs_and_clears_the_error() -> None:
    plan = finalize(run_with(status="RUNNING", claimToken="mine", error={"code": "OLD"}))
    assert plan == FinalizePlan(
        STEP, {"status": "SUCCEEDED", "finishedAt": "2026-11-23T12:01:00.000Z"}, MANIFEST, delete_error=True
    )


def test_a_failure_writes_its_error_and_keeps_nothing_stale() -> None:
    plan = finalize(run_with(status="RUNNING", claimToken="mine"), FAILED)
    assert plan == FinalizePlan(
        STEP,
        {
            "status": "FAILED",
            "finishedAt": "2026-11-23T12:01:00.000Z",
            "error": {"code": "CHART_API_FAILED", "message": "every chart failed", "details": {"failed": 2}},
        },
        {},
        delete_error=False,
    )


def test_the_plans_outputs_are_a_copy() -> None:
    outputs = dict(MANIFEST)
    plan = finalize(
        run_with(status="RUNNING", claimToken="mine"), StepFinal(StepStatus.SUCCEEDED, NOW, outputs=outputs)
    )
    assert isinstance(plan, FinalizePlan)
    outputs["later"] = "x"
    assert plan.set_outputs == MANIFEST


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (None, "flow_run run1 deleted"),
        ({"steps": {}}, "step charts no longer exists"),
        (
            run_with(status="RUNNING", claimToken="theirs"),
            "claim token differs: another execution owns the step",
        ),
        (run_with(status="RUNNING"), "claim token differs: another execution owns the step"),
        (
            run_with(status="SUCCEEDED", claimToken="mine"),
            "step charts is SUCCEEDED, not RUNNING (finalized by this claim)",
        ),
        (run_with(status="READY", claimToken="theirs"), "step charts is READY, not RUNNING"),
        (run_with(status="FAILED"), "step charts is FAILED, not RUNNING"),
    ],
    ids=[
        "run-gone",
        "step-gone",
        "other-token",
        "no-token",
        "ours-finished",
        "reaped",
        "finished-by-another",
    ],
)
def test_a_finalize_that_is_not_ours_is_refused_with_the_reason(
    document: dict[str, Any] | None, reason: str
) -> None:
    assert finalize(document) == FinalizeResult(False, reason)


def test_a_finalize_written_says_so() -> None:
    assert finalized(STEP) == FinalizeResult(True, "step charts finalized")


# --- executing a plan on a plain step (the local and in-memory stores) ------------------------


def test_a_claim_plan_applied_gives_the_claimed_step() -> None:
    document = run_with(status="READY", attempt=1, error={"code": "X"}, finishedAt="then")
    plan = claim(document)
    assert isinstance(plan, ClaimPlan)
    step = dict(document["steps"][STEP])
    apply_to_step(step, plan)
    assert step == plan.claimed_document["steps"][STEP]


def test_a_finalize_merges_its_outputs_into_those_already_there() -> None:
    step = run_with(status="RUNNING", claimToken="mine", outputs={"fromAnotherWorker": 1})["steps"][STEP]
    plan = finalize({"steps": {STEP: step}})
    assert isinstance(plan, FinalizePlan)
    apply_to_step(step, plan)
    assert step["outputs"] == {"fromAnotherWorker": 1, **MANIFEST}
    assert step["status"] == "SUCCEEDED" and step["finishedAt"] == "2026-11-23T12:01:00.000Z"


def test_a_finalize_replaces_an_output_of_the_same_name() -> None:
    step: dict[str, Any] = {"status": "RUNNING", "outputs": {"outputsManifestGcsUri": "old", "kept": 1}}
    apply_to_step(step, FinalizePlan(STEP, {}, {"outputsManifestGcsUri": "new"}, delete_error=False))
    assert step["outputs"] == {"outputsManifestGcsUri": "new", "kept": 1}


def test_outputs_of_the_wrong_shape_are_replaced_and_no_outputs_touch_nothing() -> None:
    step: dict[str, Any] = {"outputs": "garbage"}
    apply_to_step(step, FinalizePlan(STEP, {}, {"a": 1}, delete_error=False))
    assert step["outputs"] == {"a": 1}
    untouched: dict[str, Any] = {"outputs": "garbage"}
    apply_to_step(untouched, FinalizePlan(STEP, {"status": "FAILED"}, {}, delete_error=False))
    assert untouched == {"outputs": "garbage", "status": "FAILED"}
    bare: dict[str, Any] = {}
    apply_to_step(bare, FinalizePlan(STEP, {"status": "FAILED"}, {}, delete_error=True))
    assert bare == {"status": "FAILED"}


def test_a_finalize_deletes_the_error_only_when_it_writes_none() -> None:
    cleared: dict[str, Any] = {"error": {"code": "OLD"}}
    apply_to_step(cleared, FinalizePlan(STEP, {"status": "SUCCEEDED"}, {}, delete_error=True))
    assert cleared == {"status": "SUCCEEDED"}
    replaced: dict[str, Any] = {"error": {"code": "OLD"}}
    apply_to_step(replaced, FinalizePlan(STEP, {"error": {"code": "NEW"}}, {}, delete_error=False))
    assert replaced == {"error": {"code": "NEW"}}


def test_a_reap_plan_applied_deletes_its_fields_and_sets_its_own() -> None:
    step = {"status": "RUNNING", "claimToken": "t", "leaseExpiresAt": "x", "outputs": {"a": 1}}
    apply_to_step(step, ReapPlan(STEP, {"status": "READY"}, ("claimToken", "leaseExpiresAt", "absent"), True))
    assert step == {"status": "READY", "outputs": {"a": 1}}


# --- the fence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "token", "current"),
    [
        (run_with(status="RUNNING", claimToken="mine"), "mine", True),
        (run_with(status="RUNNING", claimToken="theirs"), "mine", False),  # claimed again
        (run_with(status="READY"), "mine", False),  # reaped
        (run_with(status="SUCCEEDED", claimToken="mine"), "mine", False),  # finished meanwhile
        (run_with(status="RUNNING"), "mine", False),
        ({"steps": {}}, "mine", False),
        (None, "mine", False),
    ],
)
def test_the_claim_is_current_only_while_running_under_its_token(
    document: dict[str, Any] | None, token: str, current: bool
) -> None:
    assert claim_is_current(document, STEP, token) is current


def test_a_lease_is_surely_held_until_the_margin_before_its_end() -> None:
    last_sure_moment = LEASE_END - LEASE_SAFETY_MARGIN - timedelta(microseconds=1)
    assert timedelta(seconds=30) == LEASE_SAFETY_MARGIN
    assert lease_surely_held(LEASE_END, LEASE_END - timedelta(minutes=9))
    assert lease_surely_held(LEASE_END, last_sure_moment)
    assert not lease_surely_held(LEASE_END, LEASE_END - LEASE_SAFETY_MARGIN)  # from here: ask the store
    assert not lease_surely_held(LEASE_END, LEASE_END)  # exactly at its end
    assert not lease_surely_held(LEASE_END, LEASE_END + timedelta(seconds=1))


def test_the_margin_can_be_chosen() -> None:
    now = LEASE_END - timedelta(seconds=10)
    assert lease_surely_held(LEASE_END, now, margin=timedelta(seconds=5))
    assert not lease_surely_held(LEASE_END, now, margin=timedelta(seconds=15))
    assert lease_surely_held(LEASE_END, LEASE_END - timedelta(microseconds=1), margin=timedelta(0))
    assert not lease_surely_held(LEASE_END, LEASE_END, margin=timedelta(0))


# --- an expired lease (the reaper) --------------------------------------------------------------

LEASE_AT = "2026-11-23T12:00:00.000Z"  # == rfc3339_utc(NOW)


def running(attempt: Any = 1, token: str = "mine", lease: Any = LEASE_AT, **more: Any) -> dict[str, Any]:
    return run_with(status="RUNNING", claimToken=token, attempt=attempt, leaseExpiresAt=lease, **more)


DEFAULT_MAX_ATTEMPTS = 3  # the tests' own maximum (STEP_MAX_ATTEMPTS is the caller's)


def reap(document: dict[str, Any] | None, now: datetime = NOW, **options: Any) -> ReapPlan | None:
    return plan_reap(
        document, STEP, token="mine", now=now, **{"max_attempts": DEFAULT_MAX_ATTEMPTS, **options}
    )


def test_a_lease_expiring_exactly_now_is_reaped_a_millisecond_before_it_is_not() -> None:
    assert reap(running(), now=NOW) is not None
    assert reap(running(), now=NOW + timedelta(hours=1)) is not None
    assert reap(running(), now=NOW - timedelta(milliseconds=1)) is None


def test_below_the_maximum_the_step_is_ready_again_with_its_attempt_kept() -> None:
    document = running(attempt=DEFAULT_MAX_ATTEMPTS - 1, outputs={"a": 1})
    plan = reap(document)
    assert plan == ReapPlan(STEP, {"status": "READY"}, ("claimToken", "leaseExpiresAt"), retried=True)
    step = dict(document["steps"][STEP])
    apply_to_step(step, plan)
    assert step == {"stepType": "CHART_EXPORT", "status": "READY", "attempt": 2, "outputs": {"a": 1}}


def test_at_the_maximum_the_step_fails_for_good() -> None:
    plan = reap(running(attempt=DEFAULT_MAX_ATTEMPTS), now=NOW + timedelta(seconds=5))
    assert plan == ReapPlan(
        STEP,
        {
            "status": "FAILED",
            "finishedAt": "2026-11-23T12:00:05.000Z",
            "error": {
                "code": "STEP_LEASE_EXPIRED",
                "message": "the step's lease expired 3 time(s) without a result (max 3 attempts)",
                "details": {"attempt": 3, "maxAttempts": 3, "leaseExpiresAt": LEASE_AT},
            },
        },
        ("leaseExpiresAt",),
        retried=False,
    )


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "retried"), [(1, 2, True), (2, 2, False), (5, 2, False), (4, 5, True)]
)
def test_the_maximum_is_the_callers_to_choose(attempt: int, max_attempts: int, retried: bool) -> None:
    plan = reap(running(attempt=attempt), max_attempts=max_attempts)
    assert plan is not None and plan.retried is retried


@pytest.mark.parametrize(
    "document",
    [
        None,
        {"steps": {}},
        running(token="theirs"),  # a token from another claim: claimed again meanwhile
        run_with(status="SUCCEEDED", claimToken="mine", leaseExpiresAt=LEASE_AT),  # finished meanwhile
        run_with(status="READY", leaseExpiresAt=LEASE_AT),  # reaped already
        running(lease="2026-11-23T12:00:00.001Z"),  # renewed: valid a millisecond more
        running(lease=None),
        running(lease=1795435200),  # not the string the claim writes
    ],
    ids=[
        "run-gone",
        "step-gone",
        "other-token",
        "finished",
        "ready",
        "valid",
        "no-lease",
        "lease-not-a-string",
    ],
)
def test_nothing_is_reaped_that_is_not_an_expired_lease_of_this_claim(
    document: dict[str, Any] | None,
) -> None:
    assert reap(document) is None


def test_the_claims_worst_case_is_stated_from_the_constants() -> None:
    longest_wait = CLAIM_COMMITS.cap
    sleeps = (CLAIM_TRIES - 1) * longest_wait
    rpcs = 1 + 2 * CLAIM_TRIES  # a first read, then a commit and a read per try
    rpc = 2 * DEFAULT_RPC_TIMEOUT_SECONDS  # api_core: T, and T again from T's last second
    source = inspect.getsource(step_rules)
    assert f"{CLAIM_TRIES - 1} x {longest_wait:g} = {sleeps:g} s of sleep" in source
    assert f"1 + 2 x {CLAIM_TRIES} = {rpcs} RPCs" in source and f"2T = {rpc:g} s" in source
    assert f"T = DEFAULT_RPC_TIMEOUT_SECONDS = {DEFAULT_RPC_TIMEOUT_SECONDS:g} s" in source
    assert f"Worst: {sleeps:g} + {rpcs} x {rpc:g} = {sleeps + rpcs * rpc:g} s" in source


# --- a step that waits out a bad window (core/step/patience.py) -------------------------------

HELD_BACK = StepError(ErrorCode.CHART_API_FAILED, "2 of 4 charts rendered, fewer than minImages=3")
RETRY_AT = NOW + timedelta(minutes=2)
WAITING = StepFinal.waiting(NOW + timedelta(minutes=1), RETRY_AT, HELD_BACK, MANIFEST)
EARLIER_WAIT = {
    "attempt": 1,
    "at": "2026-11-23T11:50:00.000Z",
    "retryAt": "2026-11-23T11:51:00.000Z",
    "error": {"code": "GCS_WRITE_FAILED", "message": "503"},
}


def test_a_waiting_step_stays_running_its_lease_moved_and_the_wait_recorded() -> None:
    plan = finalize(running(attempt=2, waits=[EARLIER_WAIT]), WAITING)
    assert plan == FinalizePlan(
        STEP,
        {
            "retryAt": "2026-11-23T12:02:00.000Z",
            "leaseExpiresAt": "2026-11-23T12:02:00.000Z",
            "waits": [
                EARLIER_WAIT,
                {
                    "attempt": 2,
                    "at": "2026-11-23T12:01:00.000Z",
                    "retryAt": "2026-11-23T12:02:00.000Z",
                    "error": {"code": "CHART_API_FAILED", "message": HELD_BACK.message},
                },
            ],
        },
        MANIFEST,
        delete_error=False,
        lease_until="2026-11-23T12:02:00.000Z",
    )
    step = dict(running(attempt=2)["steps"][STEP])
    apply_to_step(step, plan)
    assert (step["status"], step["claimToken"]) == ("RUNNING", "mine")  # never READY: the reaper's


def test_a_wait_is_only_ours_to_write_as_a_finalize_is() -> None:
    refused = finalize(running(token="theirs"), WAITING)
    assert isinstance(refused, FinalizeResult) and not refused.written


def test_a_waiting_step_whose_wait_is_over_is_ready_again_and_its_moment_goes() -> None:
    waiting = running(attempt=4, retryAt=LEASE_AT, waits=[EARLIER_WAIT])
    plan = reap(waiting, max_attempts=5)
    assert plan == ReapPlan(
        STEP, {"status": "READY"}, ("claimToken", "leaseExpiresAt", "retryAt"), retried=True
    )
    step = dict(waiting["steps"][STEP])
    apply_to_step(step, plan)
    assert step == {"stepType": "CHART_EXPORT", "status": "READY", "attempt": 4, "waits": [EARLIER_WAIT]}
    assert reap(waiting, now=NOW - timedelta(milliseconds=1), max_attempts=5) is None  # not yet


def test_a_waiting_step_with_no_attempt_left_fails_with_its_last_waits_cause() -> None:
    """STEP_MAX_ATTEMPTS lowered while it waited: FAILED with the wait's cause, not a lease's."""
    waiting = running(attempt=3, retryAt=LEASE_AT, waits=[EARLIER_WAIT])
    plan = reap(waiting, now=NOW + timedelta(seconds=5), max_attempts=3)
    assert plan is not None and not plan.retried
    assert plan.delete_fields == ("leaseExpiresAt", "retryAt")
    error = plan.set_fields["error"]
    assert error["code"] == "GCS_WRITE_FAILED"
    assert error["message"] == "503; after 3 attempt(s), each held back by a bad moment (max 3 attempts)"
    assert error.get("details", {})["attempts"] == [EARLIER_WAIT]


def test_a_new_claim_deletes_the_retry_moment_and_keeps_the_waits() -> None:
    plan = claim(run_with(status="READY", attempt=1, retryAt=LEASE_AT, waits=[EARLIER_WAIT]))
    assert isinstance(plan, ClaimPlan)
    assert "retryAt" in plan.delete_fields and "waits" not in plan.delete_fields
    assert plan.claimed_document["steps"][STEP]["waits"] == [EARLIER_WAIT]
