"""The reaper's rules and plain values: the lease a claim writes, an expired lease as found,
what to do with it given the lease and the run as they are now, and what became of it.
Every lease store (Firestore's compare-and-set, the in-memory one) executes `decide_reap`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.naming import LEASE_EXPIRY_FIELD, rfc3339_utc
from worker_chart_export.core.step.step_rules import ClaimPlan, attempt_of, claim_is_current, step_of
from worker_chart_export.core.types import StepStatus

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument, StepDocument, StepUpdate


@dataclass(frozen=True)
class ReapPlan:
    """A RUNNING step whose lease expired: READY again (attempt kept) or FAILED for good."""

    step_id: str
    set_fields: StepUpdate
    delete_fields: tuple[str, ...]
    retried: bool  # True: READY again; False: FAILED STEP_LEASE_EXPIRED


def plan_reap(
    document: FlowRunDocument | None,
    step_id: str,
    *,
    token: str,
    now: datetime,
    max_attempts: int,
) -> ReapPlan | None:
    """What to write for an expired lease held by `token`, or None: the step finished, was
    claimed again, or its lease is still valid. Never touches outputs."""
    step = step_of(document, step_id)
    if step is None or not claim_is_current(document, step_id, token):
        return None
    lease = step.get("leaseExpiresAt")
    if not isinstance(lease, str) or lease > rfc3339_utc(now):
        return None  # RFC 3339 UTC with fixed precision: string order is time order
    attempt = attempt_of(step)
    if attempt < max_attempts:
        return ReapPlan(
            step_id,
            {"status": StepStatus.READY.value},
            ("claimToken", "leaseExpiresAt", *(("retryAt",) if "retryAt" in step else ())),
            retried=True,
        )
    if "retryAt" in step:  # it waited out a bad window, and no attempt is left
        return _reap_failed(
            step_id, _waited_out(step, attempt, max_attempts), now, ("leaseExpiresAt", "retryAt")
        )
    error = StepError(
        ErrorCode.STEP_LEASE_EXPIRED,
        f"the step's lease expired {attempt} time(s) without a result (max {max_attempts} attempts)",
        {"attempt": attempt, "maxAttempts": max_attempts, "leaseExpiresAt": lease},
    )
    return _reap_failed(step_id, error, now, ("leaseExpiresAt",))


def _reap_failed(step_id: str, error: StepError, now: datetime, delete_fields: tuple[str, ...]) -> ReapPlan:
    return ReapPlan(
        step_id,
        {"status": StepStatus.FAILED.value, "finishedAt": rfc3339_utc(now), "error": error.to_dict()},
        delete_fields,
        retried=False,
    )


def _waited_out(step: StepDocument, attempt: int, max_attempts: int) -> StepError:
    """A waiting step the reaper finds with no attempt left (STEP_MAX_ATTEMPTS lowered since it
    began to wait): FAILED with its last wait's cause, naming every wait."""
    from worker_chart_export.core.step.patience import waits_of

    waits = waits_of(step)
    last = waits[-1]["error"] if waits else {"code": ErrorCode.STEP_LEASE_EXPIRED.value, "message": ""}
    code = ErrorCode(last["code"]) if last["code"] in ErrorCode.__members__ else ErrorCode.CHART_API_FAILED
    return StepError(
        code,
        f"{last['message']}; after {attempt} attempt(s), each held back by a bad moment "
        f"(max {max_attempts} attempts)".lstrip("; "),
        {"attempt": attempt, "maxAttempts": max_attempts, "attempts": [dict(w) for w in waits]},
    )


class LeaseFate(StrEnum):
    RETRIED = "RETRIED"  # READY again, attempt kept: a worker claims it anew
    FAILED = "FAILED"  # attempts used up: FAILED with STEP_LEASE_EXPIRED
    NOT_EXPIRED = "NOT_EXPIRED"  # the lease was renewed or is still valid: untouched
    SUPERSEDED = "SUPERSEDED"  # the step was claimed again meanwhile: untouched
    CLEARED = "CLEARED"  # the step finished or vanished: the stray lease is deleted


@dataclass(frozen=True)
class ExpiredLease:
    document_id: str
    run_id: str
    step_id: str
    token: str
    expires_at: str

    @classmethod
    def from_document(cls, document_id: str, data: Mapping[str, Any] | None) -> ExpiredLease | None:
        """None for a lease document that lacks what the reaper needs (never written by us)."""
        values = [(data or {}).get(name) for name in ("runId", "stepId", "claimToken", "expiresAt")]
        if not all(isinstance(value, str) and value for value in values):
            return None
        run_id, step_id, token, expires_at = (str(value) for value in values)
        return cls(document_id, run_id, step_id, token, expires_at)


def lease_document(run_id: str, plan: ClaimPlan) -> dict[str, Any]:
    """The step_leases document a claim writes: what the reaper needs, nothing else."""
    return {
        "runId": run_id,
        "stepId": plan.step_id,
        "claimToken": plan.claim.token,
        LEASE_EXPIRY_FIELD: plan.set_fields["leaseExpiresAt"],
        "attempt": plan.claim.attempt,
    }


def moved_lease(run_id: str, step_id: str, token: str, expires_at: str) -> dict[str, Any]:
    """The fields of a waiting step's lease (merged into the claim's): it expires when the
    step may be tried again, and the reaper then makes it READY."""
    return {"runId": run_id, "stepId": step_id, "claimToken": token, LEASE_EXPIRY_FIELD: expires_at}


@dataclass(frozen=True)
class ReapDecision:
    """What a reap does: `plan` is written on the run (None: the run is left as it is) and the
    lease deleted when `delete_lease` (always, with a plan), both in one conditional write;
    nothing is written when `delete_lease` is False."""

    outcome: LeaseFate
    plan: ReapPlan | None = None
    delete_lease: bool = False


def decide_reap(
    lease: ExpiredLease,
    lease_now: Mapping[str, Any] | None,
    run_now: FlowRunDocument | None,
    *,
    now: datetime,
    max_attempts: int,
) -> ReapDecision:
    """From the lease document and the run as they are now (None: absent)."""
    if lease_now is None or lease_now.get("claimToken") != lease.token:
        return ReapDecision(LeaseFate.SUPERSEDED)  # claimed again (a newer lease) or finalized
    plan = plan_reap(run_now, lease.step_id, token=lease.token, now=now, max_attempts=max_attempts)
    if plan is not None:
        outcome = LeaseFate.RETRIED if plan.retried else LeaseFate.FAILED
        return ReapDecision(outcome, plan, delete_lease=True)
    if claim_is_current(run_now, lease.step_id, lease.token):
        return ReapDecision(LeaseFate.NOT_EXPIRED)
    return ReapDecision(LeaseFate.CLEARED, delete_lease=True)  # the step finished or vanished


@dataclass
class ReapReport:
    """One reaper pass: each lease looked at, by outcome."""

    outcomes: dict[LeaseFate, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, outcome: LeaseFate, lease: ExpiredLease) -> None:
        self.outcomes.setdefault(outcome, []).append(f"{lease.run_id}/{lease.step_id}")

    def count(self, outcome: LeaseFate) -> int:
        return len(self.outcomes.get(outcome, []))

    def to_summary(self) -> dict[str, Any]:
        return {
            "retried": self.outcomes.get(LeaseFate.RETRIED, []),
            "failed": self.outcomes.get(LeaseFate.FAILED, []),
            "counts": {o.value.lower(): len(v) for o, v in sorted(self.outcomes.items())},
            "errors": self.errors,
        }
