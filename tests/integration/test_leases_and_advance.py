"""On the Firestore emulator (and fake-gcs-server): step leases, the reaper's conditional
writes (compare-and-sets that lose to any write landing first, then plan again), advance_flow's
preconditioned write, and the manifest fence against late writers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from harness.builders import chart_step, flow_run
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore
from worker_chart_export.adapters.firestore.client import RpcOptions, commit_batch
from worker_chart_export.adapters.firestore.leases import FirestoreLeaseReaper
from worker_chart_export.adapters.gcs import GcsArtifactStore
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import ClaimSuperseded
from worker_chart_export.core.naming import lease_document_id
from worker_chart_export.core.step.reaping import LeaseFate
from worker_chart_export.core.types import ClaimStatus, StepFinal, StepStatus
from worker_chart_export.service.advance import AdvanceEffect, advance_version
from worker_chart_export.service.reaper import reap_once
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

RUN, STEP = "run_lease", "charts"


@pytest.fixture(autouse=True)
def _logs(log_capture: Any) -> None:
    """The reaper logs each lease it looks at: into this test's own capture."""


NOW = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def put_run(
    client: firestore.Client, steps: dict[str, Any], run_id: str = RUN
) -> firestore.DocumentReference:
    ref = client.collection("flow_runs").document(run_id)
    ref.set(flow_run(steps, run_id=run_id))
    return ref


def lease_doc(client: firestore.Client, run_id: str = RUN, step_id: str = STEP) -> dict[str, Any] | None:
    snapshot = client.collection("step_leases").document(lease_document_id(run_id, step_id)).get()
    return snapshot.to_dict() if snapshot.exists else None


def claim(store: FirestoreFlowRunStore, token: str, now: datetime = NOW) -> None:
    outcome = store.claim_step(RUN, STEP, token=token, now=now, lease_expires_at=now + LEASE)
    assert outcome.status is ClaimStatus.CLAIMED, outcome.reason


def step_of(ref: firestore.DocumentReference, step_id: str = STEP) -> dict[str, Any]:
    return dict((ref.get().to_dict() or {})["steps"][step_id])


def test_a_claim_writes_its_lease_and_the_finalize_removes_it(firestore_client: firestore.Client) -> None:
    put_run(firestore_client, {STEP: chart_step()})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    claim(store, "tok-1")
    assert lease_doc(firestore_client) == {
        "runId": RUN,
        "stepId": STEP,
        "claimToken": "tok-1",
        "expiresAt": "2026-11-22T04:05:00.000Z",
        "attempt": 1,
    }
    final = StepFinal(StepStatus.SUCCEEDED, NOW + timedelta(seconds=30), outputs={"o": 1})
    assert store.finalize_step(RUN, STEP, token="tok-1", final=final).written
    assert lease_doc(firestore_client) is None


def reap_at(client: firestore.Client, moment: datetime, max_attempts: int = 3) -> Any:
    return reap_once(FirestoreLeaseReaper(client), clock=FakeClock(moment), max_attempts=max_attempts)


def test_an_expired_lease_makes_the_step_ready_again_with_its_attempt(
    firestore_client: firestore.Client,
) -> None:
    ref = put_run(firestore_client, {STEP: chart_step()})
    claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), "tok-dead")

    assert reap_at(firestore_client, NOW + LEASE - timedelta(seconds=1)).count(LeaseFate.RETRIED) == 0
    assert step_of(ref)["status"] == "RUNNING"  # the lease is still valid: untouched

    report = reap_at(firestore_client, NOW + LEASE + timedelta(seconds=1))
    assert report.count(LeaseFate.RETRIED) == 1
    step = step_of(ref)
    assert (step["status"], step["attempt"]) == ("READY", 1)
    assert "claimToken" not in step and "leaseExpiresAt" not in step
    assert lease_doc(firestore_client) is None
    # the dead execution's late finalize is refused
    late = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK).finalize_step(
        RUN, STEP, token="tok-dead", final=StepFinal(StepStatus.SUCCEEDED, NOW + LEASE * 2)
    )
    assert not late.written and step_of(ref)["status"] == "READY"


def test_the_last_attempt_fails_with_step_lease_expired(firestore_client: firestore.Client) -> None:
    ref = put_run(firestore_client, {STEP: chart_step(attempt=2)})
    claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), "tok-3")  # attempt 3 of 3
    report = reap_at(firestore_client, NOW + LEASE + timedelta(seconds=1), max_attempts=3)
    assert report.count(LeaseFate.FAILED) == 1
    step = step_of(ref)
    assert step["status"] == "FAILED" and step["attempt"] == 3
    assert step["error"]["code"] == "STEP_LEASE_EXPIRED"
    assert step["finishedAt"] == "2026-11-22T04:05:01.000Z"


def test_the_attempts_a_step_may_have_are_the_callers(firestore_client: firestore.Client) -> None:
    """STEP_MAX_ATTEMPTS at 4 (not the default 3): attempt 3 of 4 is READY again."""
    ref = put_run(firestore_client, {STEP: chart_step(attempt=2)})
    claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), "tok-3")
    report = reap_at(firestore_client, NOW + LEASE + timedelta(seconds=1), max_attempts=4)
    assert report.count(LeaseFate.RETRIED) == 1
    assert (step_of(ref)["status"], step_of(ref)["attempt"]) == ("READY", 3)


def test_a_step_claimed_again_or_finished_is_never_touched(firestore_client: firestore.Client) -> None:
    ref = put_run(firestore_client, {STEP: chart_step(), "done": chart_step()})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    claim(store, "tok-old")
    expired = FirestoreLeaseReaper(firestore_client).expired_leases(NOW + LEASE * 2, 10)
    assert [(lease.step_id, lease.token) for lease in expired] == [(STEP, "tok-old")]
    # meanwhile the step finishes under its own token: the reap must not undo it
    final = StepFinal(StepStatus.SUCCEEDED, NOW + timedelta(seconds=10))
    assert store.finalize_step(RUN, STEP, token="tok-old", final=final).written
    reaper = FirestoreLeaseReaper(firestore_client)
    assert reaper.reap(expired[0], now=NOW + LEASE * 2, max_attempts=3) is LeaseFate.SUPERSEDED
    assert step_of(ref)["status"] == "SUCCEEDED"
    # a stray lease of a finished step (e.g. written by hand) is cleared, the step untouched
    firestore_client.collection("step_leases").document(lease_document_id(RUN, STEP)).set(
        {"runId": RUN, "stepId": STEP, "claimToken": "tok-old", "expiresAt": "2026-11-22T04:05:00.000Z"}
    )
    assert reap_at(firestore_client, NOW + LEASE * 2).count(LeaseFate.CLEARED) == 1
    assert step_of(ref)["status"] == "SUCCEEDED" and lease_doc(firestore_client) is None


class CommitsAfter:
    """The reaper's commit seam: `first` runs once, just before its first commit (another
    writer going first), and every commit is counted."""

    def __init__(self, first: Callable[[], object]) -> None:
        self.calls = 0
        self._first = first

    def __call__(self, batch: firestore.WriteBatch, rpc: RpcOptions) -> list[Any]:
        self.calls += 1
        if self.calls == 1:
            self._first()
        return commit_batch(batch, rpc)


def test_a_reap_that_loses_to_another_write_of_the_run_plans_again(
    firestore_client: firestore.Client,
) -> None:
    ref = put_run(firestore_client, {STEP: chart_step(), "other": chart_step(status="PENDING")})
    claim(FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK), "tok-dead")
    commits = CommitsAfter(lambda: ref.update({"steps.other.status": "READY"}))  # e.g. advance_flow
    reaper = FirestoreLeaseReaper(firestore_client, commit=commits)

    report = reap_once(reaper, clock=FakeClock(NOW + LEASE + timedelta(seconds=1)))

    assert report.count(LeaseFate.RETRIED) == 1 and commits.calls == 2
    assert step_of(ref)["status"] == "READY" and step_of(ref, "other")["status"] == "READY"
    assert lease_doc(firestore_client) is None


def test_a_reap_that_loses_to_the_finalize_leaves_the_step_finished(
    firestore_client: firestore.Client,
) -> None:
    ref = put_run(firestore_client, {STEP: chart_step()})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    claim(store, "tok-late")
    final = StepFinal(StepStatus.SUCCEEDED, NOW + LEASE, outputs={"o": 1})
    commits = CommitsAfter(lambda: store.finalize_step(RUN, STEP, token="tok-late", final=final))
    reaper = FirestoreLeaseReaper(firestore_client, commit=commits)

    report = reap_once(reaper, clock=FakeClock(NOW + LEASE + timedelta(seconds=1)))

    # its first commit lost (the run and the lease changed); the read after it found the lease gone
    assert report.count(LeaseFate.SUPERSEDED) == 1 and commits.calls == 1
    assert step_of(ref)["status"] == "SUCCEEDED" and lease_doc(firestore_client) is None


def test_a_reap_never_deletes_a_newer_lease(firestore_client: firestore.Client) -> None:
    ref = put_run(firestore_client, {STEP: chart_step()})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    claim(store, "tok-old")
    assert store.finalize_step(RUN, STEP, token="tok-old", final=StepFinal(StepStatus.FAILED, NOW)).written
    stray = {"runId": RUN, "stepId": STEP, "claimToken": "tok-old", "expiresAt": "2026-11-22T04:05:00.000Z"}
    leases = firestore_client.collection("step_leases")
    leases.document(lease_document_id(RUN, STEP)).set(stray)
    newer = {**stray, "claimToken": "tok-newer"}
    commits = CommitsAfter(lambda: leases.document(lease_document_id(RUN, STEP)).set(newer))

    report = reap_once(
        FirestoreLeaseReaper(firestore_client, commit=commits), clock=FakeClock(NOW + LEASE * 2)
    )

    assert report.count(LeaseFate.SUPERSEDED) == 1
    assert (lease_doc(firestore_client) or {}).get("claimToken") == "tok-newer"
    assert step_of(ref)["status"] == "FAILED"


def test_the_reaper_queries_only_expired_leases(firestore_client: firestore.Client) -> None:
    for i, minutes in enumerate((1, 3, 10)):
        put_run(firestore_client, {STEP: chart_step()}, run_id=f"run{i}")
        FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK).claim_step(
            f"run{i}", STEP, token=f"t{i}", now=NOW, lease_expires_at=NOW + timedelta(minutes=minutes)
        )
    found = FirestoreLeaseReaper(firestore_client).expired_leases(NOW + timedelta(minutes=5), 10)
    assert [lease.run_id for lease in found] == ["run0", "run1"]  # ordered by expiry


def test_advance_writes_once_and_a_stale_version_is_a_noop(firestore_client: firestore.Client) -> None:
    steps = {"ohlcv": {"stepType": "OHLCV_EXPORT", "status": "SUCCEEDED"}, STEP: chart_step(status="PENDING")}
    steps[STEP]["dependsOn"] = ["ohlcv"]
    ref = put_run(firestore_client, steps)
    snapshot = ref.get()
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    document, version = snapshot.to_dict() or {}, snapshot.update_time

    first = advance_version(RUN, document, version, store)
    assert first.outcome is AdvanceEffect.WRITTEN and first.plan.ready_step_ids == (STEP,)
    assert step_of(ref)["status"] == "READY" and (ref.get().to_dict() or {})["status"] == "RUNNING"
    # the same event again (or an older one): the precondition fails, nothing is written
    again = advance_version(RUN, document, version, store)
    assert again.outcome is AdvanceEffect.STALE
    # our own write comes back as an event: it plans to nothing
    latest = ref.get()
    assert advance_version(RUN, latest.to_dict() or {}, latest.update_time, store).outcome is (
        AdvanceEffect.UNCHANGED
    )


def test_a_late_manifest_never_replaces_the_newer_executions(
    firestore_client: firestore.Client, gcs_bucket: Any
) -> None:
    storage_client, bucket = gcs_bucket
    put_run(firestore_client, {STEP: chart_step()})
    store = FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK)
    artifacts = GcsArtifactStore(storage_client, bucket, clock=FakeClock())
    path = f"charts/{RUN}/{STEP}/manifest.json"

    def fence(token: str) -> Any:
        return lambda: store.claim_is_current(RUN, STEP, token)

    claim(store, "tok-old")
    reap_at(firestore_client, NOW + LEASE + timedelta(seconds=1))  # the old execution's lease ran out
    claim(store, "tok-new", now=NOW + LEASE * 2)
    artifacts.put_manifest(path, b'{"by": "new"}', still_ours=fence("tok-new"))
    with pytest.raises(ClaimSuperseded):
        artifacts.put_manifest(path, b'{"by": "old"}', still_ours=fence("tok-old"))
    assert storage_client.bucket(bucket).blob(path).download_as_bytes() == b'{"by": "new"}'


def test_a_write_that_lands_between_the_fence_and_ours_wins(
    firestore_client: firestore.Client, gcs_bucket: Any
) -> None:
    """The race the fence alone cannot close: the check said 'ours', then the step was reaped,
    re-claimed and its new manifest written, all before our upload. The generation read before
    the fence makes our upload fail (412); looking again, the fence now says no."""
    storage_client, bucket = gcs_bucket
    artifacts = GcsArtifactStore(storage_client, bucket, clock=FakeClock())
    path = f"charts/{RUN}/{STEP}/manifest.json"
    answers = iter([True, False])

    def fence_then_newer_write() -> bool:
        ours = next(answers)
        if ours:  # right after saying yes, the newer execution writes
            storage_client.bucket(bucket).blob(path).upload_from_string(b'{"by": "new"}')
        return ours

    with pytest.raises(ClaimSuperseded):
        artifacts.put_manifest(path, b'{"by": "old"}', still_ours=fence_then_newer_write)
    assert storage_client.bucket(bucket).blob(path).download_as_bytes() == b'{"by": "new"}'
