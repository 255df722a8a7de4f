"""The state rules of one step, written once: what may be claimed, what a claim writes, when
a finalize is ours (worker contract §3, error model: idempotency).

Each store (Firestore as a compare-and-set on the version planned from, the local file under
a lock) asks these functions for a plan from one version of the document, and executes it;
a refusal is returned to the caller as it is. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.step.step_types import handles
from worker_chart_export.core.types import (
    CHART_EXPORT,
    Claim,
    ClaimResult,
    ClaimStatus,
    FinalizeResult,
    StepFinal,
    StepStatus,
)

if TYPE_CHECKING:
    from tenacity.wait import wait_base

    from worker_chart_export.core.documents import FlowRunDocument, StepDocument, StepOutputs, StepUpdate

# What a previous attempt left on the step that a new claim must not carry over (its `waits`
# stay: the step's history, named by its last FAILED).
STALE_AFTER_CLAIM = ("finishedAt", "error", "retryAt")


def steps_of(flow_run: FlowRunDocument | None) -> Mapping[str, StepDocument]:
    """The run's steps map; empty when the document has none, or something else there (a
    document read from a store is untrusted: its steps are looked at before they are used)."""
    steps = flow_run.get("steps") if flow_run is not None else None
    return steps if isinstance(steps, Mapping) else {}


def step_of(document: FlowRunDocument | None, step_id: str) -> StepDocument | None:
    """`steps[step_id]` when the document has a steps map holding a map there, else None."""
    step = steps_of(document).get(step_id)
    return step if isinstance(step, Mapping) else None


@dataclass(frozen=True)
class RunVersion:
    """One version of a flow_run as its caller saw it (an event carries one): the document
    and the update time Firestore gave that version, which a compare-and-set names."""

    document: FlowRunDocument
    update_time: datetime


def is_ready_chart_export(step: Mapping[str, object]) -> bool:
    """The step this worker may take (contract §2.1); any map, as an event's skim of a step."""
    return handles(step) and step.get("status") == StepStatus.READY


def attempt_of(step: StepDocument) -> int:
    """The attempts made so far; anything but a non-negative integer counts as none."""
    attempt = step.get("attempt")
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0 else 0


@dataclass(frozen=True)
class ClaimPlan:
    """READY -> RUNNING for one step: the fields to set and those to delete on it."""

    step_id: str
    set_fields: StepUpdate
    delete_fields: tuple[str, ...]
    claim: Claim
    # the document as it will be once the claim is written: the step's authoritative inputs
    claimed_document: FlowRunDocument

    def outcome(self, how: str = "") -> ClaimResult:
        return ClaimResult(
            ClaimStatus.CLAIMED,
            f"step {self.step_id} claimed (attempt {self.claim.attempt}{how})",
            self.claimed_document,
            self.claim,
        )


def claim_refusal(run_id: str, step_id: str, document: FlowRunDocument | None) -> ClaimResult | None:
    """Why the step cannot be claimed, or None when it is a READY CHART_EXPORT step."""
    if document is None:
        return ClaimResult(ClaimStatus.NOT_FOUND, f"flow_run {run_id} does not exist")
    step = step_of(document, step_id)
    if step is None:
        return ClaimResult(ClaimStatus.CONFLICT, f"step {step_id} does not exist")
    if not handles(step):
        return ClaimResult(
            ClaimStatus.CONFLICT, f"step {step_id} is a {step.get('stepType')} step, not {CHART_EXPORT}"
        )
    if not is_ready_chart_export(step):
        return ClaimResult(ClaimStatus.CONFLICT, f"step {step_id} is {step.get('status')}, not READY")
    return None


def plan_claim(
    document: FlowRunDocument | None,
    run_id: str,
    step_id: str,
    *,
    token: str,
    now: datetime,
    lease_expires_at: datetime,
) -> ClaimPlan | ClaimResult:
    """The claim to write, or the refusal (NOT_FOUND / CONFLICT) to return as it is."""
    refusal = claim_refusal(run_id, step_id, document)
    if refusal is not None:
        return refusal
    found = step_of(document, step_id)
    assert document is not None  # claim_refusal found the step in it
    assert found is not None
    step: StepDocument = {**found}
    attempt = attempt_of(step) + 1
    set_fields: StepUpdate = {
        "status": StepStatus.RUNNING.value,
        "startedAt": rfc3339_utc(now),
        "attempt": attempt,
        "claimToken": token,
        "leaseExpiresAt": rfc3339_utc(lease_expires_at),
    }
    delete_fields = tuple(name for name in STALE_AFTER_CLAIM if name in step)
    _write_fields(step, set_fields, delete_fields)
    claimed: FlowRunDocument = {**document, "steps": {**steps_of(document), step_id: step}}
    return ClaimPlan(step_id, set_fields, delete_fields, Claim(token, attempt, lease_expires_at), claimed)


# Error model, "Step claim retries": 3-5 retries, 100-500 ms apart with jitter
# (core.retry.CLAIM_COMMITS). A retry is only for a step still READY after a commit that lost
# to another write of the run (another step's claim or finalize, advance_flow): losers of a
# race for the same step stop at once. The claim's layers and worst case, with the production
# constants: the tries, at most 0.5 s apart (claim_retry_wait): 4 x 0.5 = 2 s of sleep; a
# read first when no version was seen, then per try a commit and, when it lost, a read:
# 1 + 2 x 5 = 11 RPCs, each under 2T = 20 s (adapters/firestore/client.py: api_core's retry
# deadline T = DEFAULT_RPC_TIMEOUT_SECONDS = 10 s; an attempt started in its last second
# gets T again). Worst: 2 + 11 x 20 = 222 s. An outage ends the claim after one read back.


def claim_retry_wait() -> wait_base:
    """Between two claim commits, at random (so contenders that lost together do not come
    back together): 0.1-0.2 s, then 0.1-0.4 s, then 0.1-0.5 s."""
    from worker_chart_export.core.retry import CLAIM_COMMITS  # tenacity: not on the no-op path

    return CLAIM_COMMITS.wait()


def settled_claim(
    document: FlowRunDocument | None,
    run_id: str,
    step_id: str,
    *,
    token: str,
    now: datetime,
    lease_expires_at: datetime,
) -> ClaimResult | None:
    """What a version read after a claim commit that did not go through as planned (its
    precondition failed, or its answer was lost) says: the claim when the step is RUNNING
    under our token (our commit landed), the no-op when it is not ours to take any more
    (another execution won, or the step or the run went), None while it is still READY."""
    confirmed = confirmed_claim(document, step_id, token=token, now=now, lease_expires_at=lease_expires_at)
    if confirmed is not None:
        return confirmed
    refusal = claim_refusal(run_id, step_id, document)
    if refusal is None:
        return None
    return ClaimResult(refusal.status, f"{refusal.reason} (lost the claim race)")


def confirmed_claim(
    document: FlowRunDocument | None,
    step_id: str,
    *,
    token: str,
    now: datetime,
    lease_expires_at: datetime,
) -> ClaimResult | None:
    """The claim, when the step is RUNNING under our token (the commit landed though its
    answer was lost, or a retry of it found it landed), else None."""
    step = step_of(document, step_id)
    if step is None or step.get("claimToken") != token or step.get("status") != StepStatus.RUNNING:
        return None
    assert document is not None
    attempt = attempt_of(step) or 1
    return ClaimResult(
        ClaimStatus.CLAIMED,
        f"step {step_id} claimed (attempt {attempt}; commit confirmed by a re-read)",
        {**document},
        Claim(token, attempt, lease_expires_at),
    )


@dataclass(frozen=True)
class FinalizePlan:
    """RUNNING (ours) -> SUCCEEDED/FAILED: fields to set on the step, one output at a time
    (outputs other workers or earlier attempts wrote stay), and whether `error` goes. Or the
    step waits (`lease_until`, RFC 3339): it stays RUNNING under our claim and its lease is
    moved to that moment instead of deleted."""

    step_id: str
    set_fields: StepUpdate
    set_outputs: StepOutputs
    delete_error: bool
    lease_until: str | None = None


def finalize_refusal(
    run_id: str, step_id: str, token: str, document: FlowRunDocument | None
) -> FinalizeResult | None:
    """Why finalize must not write, or None when the step is RUNNING under our token."""
    if document is None:
        return FinalizeResult(False, f"flow_run {run_id} deleted")
    step = step_of(document, step_id)
    if step is None:
        return FinalizeResult(False, f"step {step_id} no longer exists")
    status = step.get("status")
    if status != StepStatus.RUNNING:
        # Ours when an earlier finalize landed although its answer was lost (e.g. a timeout).
        ours = " (finalized by this claim)" if step.get("claimToken") == token else ""
        return FinalizeResult(False, f"step {step_id} is {status}, not RUNNING{ours}")
    if step.get("claimToken") != token:
        return FinalizeResult(False, "claim token differs: another execution owns the step")
    return None


def plan_finalize(
    document: FlowRunDocument | None, run_id: str, step_id: str, *, token: str, final: StepFinal
) -> FinalizePlan | FinalizeResult:
    """The finalize to write, or the refusal (written=False) to return as it is."""
    refusal = finalize_refusal(run_id, step_id, token, document)
    if refusal is not None:
        return refusal
    outputs: StepOutputs = {**final.outputs}
    if final.retry_at is not None:
        return _plan_wait(document, step_id, final, outputs)
    set_fields: StepUpdate = {
        "status": final.status.value,
        "finishedAt": rfc3339_utc(final.finished_at),
    }
    if final.error is not None:
        set_fields["error"] = final.error.to_dict()
    return FinalizePlan(step_id, set_fields, outputs, delete_error=final.error is None)


def _plan_wait(
    document: FlowRunDocument | None, step_id: str, final: StepFinal, outputs: StepOutputs
) -> FinalizePlan:
    """The step waits (core/step/patience.py): still RUNNING under our claim, `retryAt` and
    its lease at the wait's end, the wait added to its history."""
    from worker_chart_export.core.step.patience import MAX_WAITS_KEPT, wait_record, waits_of

    assert final.retry_at is not None and final.error is not None  # StepFinal.waiting's
    step = step_of(document, step_id)
    assert step is not None  # finalize_refusal found it RUNNING under our claim
    until = rfc3339_utc(final.retry_at)
    wait = wait_record(attempt_of(step) or 1, final.finished_at, final.retry_at, final.error)
    set_fields: StepUpdate = {
        "retryAt": until,
        "leaseExpiresAt": until,
        "waits": [*waits_of(step), wait][-MAX_WAITS_KEPT:],
    }
    return FinalizePlan(step_id, set_fields, outputs, delete_error=False, lease_until=until)


def finalized(step_id: str) -> FinalizeResult:
    return FinalizeResult(True, f"step {step_id} finalized")


def _write_fields(step: StepDocument, set_fields: StepUpdate, delete_fields: Iterable[str]) -> None:
    # StepUpdate's keys are StepDocument's, of the same types (tests/unit/core/
    # test_documents.py), which mypy cannot see across two TypedDicts: the step as the dict it is
    fields: dict[str, object] = step  # type: ignore[assignment]
    for name in delete_fields:
        fields.pop(name, None)
    fields.update(set_fields)


class FieldsPlan(Protocol):
    """A plan that sets some fields of a step and deletes others: a claim's, a reap's."""

    @property
    def set_fields(self) -> StepUpdate: ...

    @property
    def delete_fields(self) -> tuple[str, ...]: ...


def apply_to_step(step: StepDocument, plan: FieldsPlan | FinalizePlan) -> None:
    """Execute a plan on a plain step dict (the local and in-memory stores' documents)."""
    if not isinstance(plan, FinalizePlan):
        _write_fields(step, plan.set_fields, plan.delete_fields)
        return
    _write_fields(step, plan.set_fields, ())
    if plan.delete_error:
        step.pop("error", None)
    if plan.set_outputs:
        previous = step.get("outputs")
        step["outputs"] = {**(previous if isinstance(previous, dict) else {}), **plan.set_outputs}


def claim_is_current(document: FlowRunDocument | None, step_id: str, token: str) -> bool:
    """The fence before side effects that could override a newer execution: the step is
    still RUNNING under our claim (not reaped, not finalized by someone else)."""
    step = step_of(document, step_id)
    return step is not None and step.get("status") == StepStatus.RUNNING and step.get("claimToken") == token


# How far inside its lease a claim must be to be sure it still holds the step without asking
# the store: the reaper takes a step back only once the lease expired by ITS clock, so this
# covers the instances' clocks disagreeing (milliseconds on a managed platform) many times over.
LEASE_SAFETY_MARGIN = timedelta(seconds=30)


def lease_surely_held(
    lease_expires_at: datetime, now: datetime, margin: timedelta = LEASE_SAFETY_MARGIN
) -> bool:
    """True when the claim cannot have been reaped yet, so the fence needs no read; False
    means "ask the store" (claim_is_current), not "lost"."""
    return now < lease_expires_at - margin
