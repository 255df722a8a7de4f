"""FirestoreFlowRunStore against the real Firestore emulator: claim and finalize, each a
compare-and-set on the version of the run document it was planned from."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from harness.broken_firestore import BrokenFirestore
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore
from worker_chart_export.adapters.firestore.client import RpcOptions, commit_batch
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import ClaimContended, TransientStoreError
from worker_chart_export.core.retry import CLAIM_COMMITS
from worker_chart_export.core.step.step_rules import RunVersion
from worker_chart_export.core.types import Claim, ClaimResult, ClaimStatus, StepFinal, StepStatus
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

RUN_ID = "RUN_20261122_BTCUSDT"
STEP_ID = "charts_1h"
NOW = datetime(2026, 11, 22, 4, 12, 3, 123000, tzinfo=UTC)
LEASE = NOW + timedelta(minutes=10)
FINISHED = NOW + timedelta(seconds=42)


def chart_step(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "stepType": "CHART_EXPORT",
        "status": status,
        "timeframe": "1h",
        "dependsOn": ["ohlcv_1h"],
        "inputs": {"minImages": 1, "requests": [{"chartTemplateId": "price_psar_adi_v1"}]},
        **extra,
    }


def flow_run(steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "runId": RUN_ID,
        "flowKey": "daily_crypto_report",
        "status": "RUNNING",
        "scope": {"symbol": "BTCUSDT"},
        "steps": steps,
    }


def default_steps(status: str = "READY", **extra: Any) -> dict[str, Any]:
    return {
        "ohlcv_1h": {"stepType": "OHLCV_EXPORT", "status": "SUCCEEDED", "outputs": {"gcs_uri": "gs://b/o"}},
        STEP_ID: chart_step(status, **extra),
        "report": {"stepType": "LLM_REPORT", "status": "PENDING", "dependsOn": [STEP_ID]},
    }


def put(client: firestore.Client, document: dict[str, Any]) -> firestore.DocumentReference:
    ref = client.collection("flow_runs").document(RUN_ID)
    ref.set(document)
    return ref


def stored(ref: firestore.DocumentReference) -> tuple[dict[str, Any] | None, Any]:
    snapshot = ref.get()
    return snapshot.to_dict(), snapshot.update_time


def claim(
    store: FirestoreFlowRunStore, token: str = "tok-A", step_id: str = STEP_ID, seen: RunVersion | None = None
) -> ClaimResult:
    return store.claim_step(RUN_ID, step_id, token=token, now=NOW, lease_expires_at=LEASE, seen=seen)


def seen_version(ref: firestore.DocumentReference) -> RunVersion:
    """The version an event about the document's current state carries."""
    snapshot = ref.get()
    return RunVersion(snapshot.to_dict() or {}, snapshot.update_time)


def succeeded(**outputs: Any) -> StepFinal:
    return StepFinal(StepStatus.SUCCEEDED, FINISHED, outputs=dict(outputs))


# --- claim ---------------------------------------------------------------------------------


def test_first_claim_writes_running_fields(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    before, _ = stored(ref)
    assert before is not None

    outcome = claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK))

    assert outcome.status is ClaimStatus.CLAIMED
    assert outcome.claim == Claim("tok-A", 1, LEASE)
    after, _ = stored(ref)
    assert after is not None
    step = after["steps"][STEP_ID]
    assert step == {
        **before["steps"][STEP_ID],
        "status": "RUNNING",
        "startedAt": "2026-11-22T04:12:03.123Z",
        "attempt": 1,
        "claimToken": "tok-A",
        "leaseExpiresAt": "2026-11-22T04:22:03.123Z",
    }
    # nothing else in the run changed
    assert {k: v for k, v in after.items() if k != "steps"} == {
        k: v for k, v in before.items() if k != "steps"
    }
    assert {k: v for k, v in after["steps"].items() if k != STEP_ID} == {
        k: v for k, v in before["steps"].items() if k != STEP_ID
    }
    # the returned flow_run is the document with the claim applied
    assert outcome.flow_run == after


def test_a_claim_on_the_events_version_is_one_commit(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    commits = CountingCommits()
    store = FirestoreFlowRunStore(firestore_client, commit=commits, clock=SYSTEM_CLOCK)

    outcome = claim(store, seen=seen_version(ref))

    assert outcome.status is ClaimStatus.CLAIMED and commits.calls == 1
    after, _ = stored(ref)
    assert outcome.flow_run == after and after is not None
    assert after["steps"][STEP_ID]["claimToken"] == "tok-A"
    assert firestore_client.collection("step_leases").get()  # the lease, in the same commit
    # and the finalize writes on the version the claim committed: one commit more
    assert store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded()).written
    assert commits.calls == 2


def test_a_stale_event_loses_its_commit_and_learns_at_once(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    stale = seen_version(ref)
    assert (
        claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), token="tok-A").status
        is ClaimStatus.CLAIMED
    )
    before = stored(ref)
    clock = FakeClock()
    commits = CountingCommits()

    outcome = claim(FirestoreFlowRunStore(firestore_client, commit=commits, clock=clock), "tok-B", seen=stale)

    assert outcome.status is ClaimStatus.CONFLICT and "RUNNING" in outcome.reason
    assert "lost the claim race" in outcome.reason
    assert commits.calls == 1 and clock.sleeps == []  # no retry, no wait: the read told it
    assert stored(ref) == before


def test_a_claim_that_lost_to_another_write_of_the_run_tries_again(
    firestore_client: firestore.Client,
) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    seen = seen_version(ref)
    ref.update({"steps.report.note": "written after the event"})  # e.g. advance_flow
    clock = FakeClock()
    commits = CountingCommits()

    outcome = claim(FirestoreFlowRunStore(firestore_client, commit=commits, clock=clock), seen=seen)

    assert outcome.status is ClaimStatus.CLAIMED and commits.calls == 2
    assert len(clock.sleeps) == 1 and 0.1 <= clock.sleeps[0] <= 0.5
    after, _ = stored(ref)
    assert after is not None and after["steps"]["report"]["note"] == "written after the event"
    assert after["steps"][STEP_ID]["claimToken"] == "tok-A"


def test_a_claim_still_ready_after_every_try_is_contended(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    clock = FakeClock()
    commits = CountingCommits(another_step_written(ref))
    store = FirestoreFlowRunStore(firestore_client, commit=commits, clock=clock)

    CLAIM_TRIES = CLAIM_COMMITS.attempts
    with pytest.raises(ClaimContended, match=f"still READY after {CLAIM_TRIES} commits"):
        claim(store, seen=seen_version(ref))

    assert commits.calls == CLAIM_TRIES
    assert len(clock.sleeps) == CLAIM_TRIES - 1 and all(0.1 <= s <= 0.5 for s in clock.sleeps)
    after, _ = stored(ref)
    assert after is not None and after["steps"][STEP_ID]["status"] == "READY"
    assert "claimToken" not in after["steps"][STEP_ID]
    assert not firestore_client.collection("step_leases").get()


def test_a_claim_on_a_deleted_run_is_not_found(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    seen = seen_version(ref)
    ref.delete()

    outcome = claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), seen=seen)

    assert outcome.status is ClaimStatus.NOT_FOUND
    assert not ref.get().exists
    assert not firestore_client.collection("step_leases").get()


def test_reclaim_increments_attempt_and_drops_previous_outcome(firestore_client: firestore.Client) -> None:
    previous = {
        "attempt": 2,
        "finishedAt": "2026-11-21T04:00:00.000Z",
        "error": {"code": "CHART_API_FAILED", "message": "earlier attempt"},
        "claimToken": "old-token",
        "outputs": {"outputsManifestGcsUri": "gs://b/charts/old/manifest.json"},
    }
    ref = put(firestore_client, flow_run(default_steps("READY", **previous)))

    outcome = claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), token="tok-new")

    assert outcome.status is ClaimStatus.CLAIMED
    assert outcome.claim is not None and outcome.claim.attempt == 3
    after, _ = stored(ref)
    assert after is not None
    step = after["steps"][STEP_ID]
    assert step["attempt"] == 3
    assert step["claimToken"] == "tok-new"
    assert "finishedAt" not in step
    assert "error" not in step
    assert step["outputs"] == previous["outputs"]  # outputs are finalize's business
    assert outcome.flow_run is not None and outcome.flow_run["steps"][STEP_ID] == step


@pytest.mark.parametrize(
    ("steps", "reason_part"),
    [
        (default_steps("RUNNING", claimToken="someone-else", attempt=1), "is RUNNING, not READY"),
        (default_steps("SUCCEEDED", claimToken="t", finishedAt="2026-11-22T04:00:00.000Z"), "is SUCCEEDED"),
        (default_steps("FAILED"), "is FAILED"),
        (default_steps("PENDING"), "is PENDING"),
        ({"other": chart_step("READY")}, f"step {STEP_ID} does not exist"),
        ({STEP_ID: {"stepType": "LLM_REPORT", "status": "READY"}}, "LLM_REPORT step, not CHART_EXPORT"),
    ],
    ids=["running", "succeeded", "failed", "pending", "missing-step", "other-type"],
)
def test_claim_of_unclaimable_step_is_a_conflict_without_writes(
    firestore_client: firestore.Client, steps: dict[str, Any], reason_part: str
) -> None:
    ref = put(firestore_client, flow_run(steps))
    before = stored(ref)

    outcome = claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK))

    assert outcome.status is ClaimStatus.CONFLICT
    assert reason_part in outcome.reason
    assert outcome.claim is None
    assert stored(ref) == before  # same content and same update_time: nothing was written


def test_claim_of_missing_run_is_not_found(firestore_client: firestore.Client) -> None:
    outcome = claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK))

    assert outcome.status is ClaimStatus.NOT_FOUND
    assert RUN_ID in outcome.reason
    assert not firestore_client.collection("flow_runs").document(RUN_ID).get().exists


@pytest.mark.parametrize("from_event", [True, False], ids=["event-version", "read-first"])
def test_concurrent_claims_have_exactly_one_winner_and_no_redelivery(
    firestore_client: firestore.Client, from_event: bool
) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    seen = seen_version(ref) if from_event else None
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    contenders = 10
    barrier = threading.Barrier(contenders)
    results: dict[str, ClaimResult | BaseException] = {}

    def contend(token: str) -> None:
        barrier.wait()
        try:
            results[token] = claim(store, token=token, seen=seen)
        except BaseException as exc:  # recorded, asserted below
            results[token] = exc

    threads = [threading.Thread(target=contend, args=(f"tok-{i}",)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # until it ends: pytest-timeout (pyproject) guards a hang

    # no lock to time out on and nobody left asking for a redelivery: the losers saw RUNNING
    assert all(isinstance(r, ClaimResult) for r in results.values()), results
    outcomes = {t: r for t, r in results.items() if isinstance(r, ClaimResult)}
    winners = [t for t, o in outcomes.items() if o.status is ClaimStatus.CLAIMED]
    assert len(winners) == 1, outcomes
    assert all(o.status is ClaimStatus.CONFLICT for t, o in outcomes.items() if t != winners[0])
    after, _ = stored(ref)
    assert after is not None
    assert after["steps"][STEP_ID]["claimToken"] == winners[0]
    assert after["steps"][STEP_ID]["attempt"] == 1
    lease = firestore_client.collection("step_leases").get()
    assert [doc.to_dict()["claimToken"] for doc in lease] == winners  # the winner's lease only


def test_a_claim_aborted_by_contention_reads_and_tries_again(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    clock = FakeClock()

    def aborted_once(batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        if not clock.sleeps:
            raise api_exceptions.Aborted("Too much contention on these documents")
        return commit_batch(batch, rpc)

    outcome = claim(
        FirestoreFlowRunStore(firestore_client, commit=aborted_once, clock=clock), seen=seen_version(ref)
    )

    assert outcome.status is ClaimStatus.CLAIMED and len(clock.sleeps) == 1
    after, _ = stored(ref)
    assert after is not None and after["steps"][STEP_ID]["claimToken"] == "tok-A"


# --- odd step ids ----------------------------------------------------------------------------

ODD_STEP_ID = "charts 1h.v2-`x`"


def test_odd_step_id_claims_and_finalizes_without_touching_siblings(
    firestore_client: firestore.Client,
) -> None:
    # siblings whose names a split dotted path would hit: "charts 1h", "charts 1h" > "v2-`x`"
    steps = {
        ODD_STEP_ID: chart_step("READY"),
        "charts 1h": chart_step("READY", inputs={"sibling": True}),
        "charts": chart_step("PENDING"),
    }
    ref = put(firestore_client, flow_run(steps))
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)

    claimed = claim(store, token="tok-odd", step_id=ODD_STEP_ID)
    assert claimed.status is ClaimStatus.CLAIMED, claimed.reason
    final = StepFinal(
        StepStatus.SUCCEEDED,
        FINISHED,
        outputs={"outputsManifestGcsUri": "gs://b/charts/m.json", "odd.key `k`": 1},
    )
    finalized = store.finalize_step(RUN_ID, ODD_STEP_ID, token="tok-odd", final=final)

    assert finalized.written, finalized.reason
    after, _ = stored(ref)
    assert after is not None
    assert set(after["steps"]) == set(steps)  # no stray steps created from split paths
    odd = after["steps"][ODD_STEP_ID]
    assert odd["status"] == "SUCCEEDED"
    assert odd["claimToken"] == "tok-odd"
    assert odd["attempt"] == 1
    assert odd["finishedAt"] == "2026-11-22T04:12:45.123Z"
    assert odd["outputs"] == {"outputsManifestGcsUri": "gs://b/charts/m.json", "odd.key `k`": 1}
    assert after["steps"]["charts 1h"] == steps["charts 1h"]
    assert after["steps"]["charts"] == steps["charts"]


# --- finalize --------------------------------------------------------------------------------


def claimed_run(client: firestore.Client, token: str = "tok-A", **extra: Any) -> firestore.DocumentReference:
    ref = put(client, flow_run(default_steps("READY", **extra)))
    assert claim(FirestoreFlowRunStore(client, clock=SYSTEM_CLOCK), token=token).status is ClaimStatus.CLAIMED
    return ref


def test_finalize_success_writes_status_and_merges_outputs(firestore_client: firestore.Client) -> None:
    ref = claimed_run(firestore_client, outputs={"keptFromBefore": "x", "outputsManifestGcsUri": "old"})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)

    outcome = store.finalize_step(
        RUN_ID, STEP_ID, token="tok-A", final=succeeded(outputsManifestGcsUri="gs://b/new/manifest.json")
    )

    assert outcome.written, outcome.reason
    after, _ = stored(ref)
    assert after is not None
    step = after["steps"][STEP_ID]
    assert step["status"] == "SUCCEEDED"
    assert step["finishedAt"] == "2026-11-22T04:12:45.123Z"
    assert step["claimToken"] == "tok-A"
    assert step["outputs"] == {"keptFromBefore": "x", "outputsManifestGcsUri": "gs://b/new/manifest.json"}
    assert "error" not in step


def test_finalize_failure_writes_the_error(firestore_client: firestore.Client) -> None:
    ref = claimed_run(firestore_client)
    error = StepError(
        ErrorCode.VALIDATION_FAILED, "timeframe 7h is not a CHART-IMG interval", {"field": "timeframe"}
    )

    outcome = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK).finalize_step(
        RUN_ID, STEP_ID, token="tok-A", final=StepFinal(StepStatus.FAILED, FINISHED, error=error)
    )

    assert outcome.written
    after, _ = stored(ref)
    assert after is not None
    step = after["steps"][STEP_ID]
    assert step["status"] == "FAILED"
    assert step["error"] == {
        "code": "VALIDATION_FAILED",
        "message": "timeframe 7h is not a CHART-IMG interval",
        "details": {"field": "timeframe"},
    }


def test_finalize_with_another_token_writes_nothing(firestore_client: firestore.Client) -> None:
    ref = claimed_run(firestore_client, token="tok-owner")
    before = stored(ref)

    outcome = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK).finalize_step(
        RUN_ID, STEP_ID, token="tok-intruder", final=succeeded()
    )

    assert not outcome.written
    assert "claim token differs" in outcome.reason
    assert stored(ref) == before


def test_second_finalize_writes_nothing(firestore_client: firestore.Client) -> None:
    ref = claimed_run(firestore_client)
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    assert store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded(a=1)).written
    before = stored(ref)

    again = store.finalize_step(
        RUN_ID, STEP_ID, token="tok-A", final=StepFinal(StepStatus.FAILED, FINISHED, outputs={"a": 2})
    )

    assert not again.written
    assert "is SUCCEEDED" in again.reason
    assert "finalized by this claim" in again.reason
    assert stored(ref) == before


def test_finalize_after_the_run_was_deleted_writes_nothing(firestore_client: firestore.Client) -> None:
    ref = claimed_run(firestore_client)
    ref.delete()

    outcome = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK).finalize_step(
        RUN_ID, STEP_ID, token="tok-A", final=succeeded()
    )

    assert not outcome.written
    assert "deleted" in outcome.reason
    assert not ref.get().exists


class CountingCommits:
    """The store's commit seam: counts commits, and can let another writer go first."""

    def __init__(self, before_each: Callable[[int], None] | None = None) -> None:
        self.calls = 0
        self._before_each = before_each

    def __call__(self, batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        self.calls += 1
        if self._before_each is not None:
            self._before_each(self.calls)
        return commit_batch(batch, rpc)


def another_step_written(ref: firestore.DocumentReference) -> Callable[[int], None]:
    """Before each of our commits, another writer updates a sibling step: real contention."""
    return lambda n: ref.update({"steps.report.note": f"write {n}"})


def test_finalize_after_our_claim_is_one_commit(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    commits = CountingCommits()
    store = FirestoreFlowRunStore(firestore_client, commit=commits, clock=SYSTEM_CLOCK)
    assert claim(store).status is ClaimStatus.CLAIMED
    assert firestore_client.collection("step_leases").get()
    claimed = commits.calls

    outcome = store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded(a=1))

    assert outcome.written and commits.calls - claimed == 1  # on the version the claim committed
    after, _ = stored(ref)
    assert after is not None and after["steps"][STEP_ID]["status"] == "SUCCEEDED"
    assert not firestore_client.collection("step_leases").get()  # the lease went with it


def test_finalize_after_another_step_was_written_keeps_that_write(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    commits = CountingCommits()
    store = FirestoreFlowRunStore(firestore_client, commit=commits, clock=SYSTEM_CLOCK)
    assert claim(store).status is ClaimStatus.CLAIMED
    ref.update({"steps.report.status": "READY"})  # e.g. advance_flow, between claim and finalize
    claimed = commits.calls

    outcome = store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded(a=1))

    assert outcome.written and commits.calls - claimed == 2  # the remembered version failed once
    after, _ = stored(ref)
    assert after is not None
    assert after["steps"][STEP_ID]["status"] == "SUCCEEDED"
    assert after["steps"]["report"]["status"] == "READY"


def test_finalize_after_our_claim_was_taken_back_writes_nothing(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    assert claim(store).status is ClaimStatus.CLAIMED
    # the reaper gave the step to another execution: the version the store remembers is gone
    ref.update({f"steps.{STEP_ID}.status": "RUNNING", f"steps.{STEP_ID}.claimToken": "tok-newer"})
    before = stored(ref)

    outcome = store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded())

    assert not outcome.written and "another execution owns the step" in outcome.reason
    assert stored(ref) == before


def test_finalize_that_keeps_losing_to_other_writes_is_a_transient_error(
    firestore_client: firestore.Client,
) -> None:
    ref = claimed_run(firestore_client)
    commits = CountingCommits(another_step_written(ref))
    store = FirestoreFlowRunStore(firestore_client, max_attempts=2, commit=commits, clock=SYSTEM_CLOCK)

    with pytest.raises(TransientStoreError, match="changed under 2 tries"):
        store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded())

    after, _ = stored(ref)
    assert after is not None and after["steps"][STEP_ID]["status"] == "RUNNING"
    assert commits.calls == 2


# --- unreachable Firestore -------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["claim", "finalize"])
def test_unreachable_firestore_raises_transient_error_quickly(
    unreachable_firestore_client: firestore.Client, unavailable_firestore: BrokenFirestore, operation: str
) -> None:
    store = FirestoreFlowRunStore(unreachable_firestore_client, rpc_timeout=2.0, clock=SYSTEM_CLOCK)

    with pytest.raises(TransientStoreError, match=f"{operation} of step {STEP_ID}.*unavailable"):
        if operation == "claim":
            claim(store)
        else:
            store.finalize_step(RUN_ID, STEP_ID, token="tok-A", final=succeeded())

    assert unavailable_firestore.gave_up_within(2.0)


@pytest.mark.parametrize(
    "lost_answer",
    [
        api_exceptions.ServiceUnavailable("connection reset after commit"),
        # the client's bounded retry sent the landed commit again: its precondition fails
        api_exceptions.FailedPrecondition("the stored version does not match the required base version"),
    ],
    ids=["outage", "retried-commit"],
)
def test_claim_whose_commit_landed_but_answer_was_lost_is_still_ours(
    firestore_client: firestore.Client, lost_answer: Exception
) -> None:
    ref = put(firestore_client, flow_run(default_steps()))

    commits: list[str] = []

    def lose_the_first_answer(batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        results = commit_batch(batch, rpc)
        commits.append("landed")
        if len(commits) == 1:
            raise lost_answer
        return results

    store = FirestoreFlowRunStore(firestore_client, commit=lose_the_first_answer, clock=SYSTEM_CLOCK)
    outcome = claim(store, token="tok-lost", seen=seen_version(ref))
    assert outcome.status is ClaimStatus.CLAIMED and "confirmed by a re-read" in outcome.reason
    assert outcome.claim is not None and outcome.claim.token == "tok-lost" and outcome.claim.attempt == 1
    assert outcome.flow_run is not None and outcome.flow_run["steps"][STEP_ID]["status"] == "RUNNING"
    after, _ = stored(ref)
    assert after is not None and after["steps"][STEP_ID]["claimToken"] == "tok-lost"
    # the finalize writes on the version that read found: one commit more, no read
    assert store.finalize_step(RUN_ID, STEP_ID, token="tok-lost", final=succeeded()).written
    assert len(commits) == 2


def test_claim_lost_to_an_outage_before_commit_is_a_transient_error(
    firestore_client: firestore.Client,
) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    before = stored(ref)

    def outage(batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        raise api_exceptions.ServiceUnavailable("connection refused")

    with pytest.raises(TransientStoreError, match="unavailable"):
        claim(
            FirestoreFlowRunStore(firestore_client, commit=outage, clock=SYSTEM_CLOCK),
            token="tok-never",
            seen=seen_version(ref),
        )
    assert stored(ref) == before


def test_claim_met_by_an_outage_after_another_won_is_a_conflict(firestore_client: firestore.Client) -> None:
    ref = put(firestore_client, flow_run(default_steps()))
    seen = seen_version(ref)

    def winner_then_outage(batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        ref.update({f"steps.{STEP_ID}.status": "RUNNING", f"steps.{STEP_ID}.claimToken": "winner"})
        raise api_exceptions.ServiceUnavailable("connection reset")

    outcome = claim(
        FirestoreFlowRunStore(firestore_client, commit=winner_then_outage, clock=SYSTEM_CLOCK), seen=seen
    )

    assert outcome.status is ClaimStatus.CONFLICT and "RUNNING" in outcome.reason
