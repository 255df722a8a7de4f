"""Plain values of the reaper: an expired lease as found, and what became of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ReapOutcome(StrEnum):
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


@dataclass
class ReapReport:
    """One reaper pass: each lease looked at, by outcome."""

    outcomes: dict[ReapOutcome, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, outcome: ReapOutcome, lease: ExpiredLease) -> None:
        self.outcomes.setdefault(outcome, []).append(f"{lease.run_id}/{lease.step_id}")

    def count(self, outcome: ReapOutcome) -> int:
        return len(self.outcomes.get(outcome, []))

    def to_summary(self) -> dict[str, Any]:
        return {
            "retried": self.outcomes.get(ReapOutcome.RETRIED, []),
            "failed": self.outcomes.get(ReapOutcome.FAILED, []),
            "counts": {o.value.lower(): len(v) for o, v in sorted(self.outcomes.items())},
            "errors": self.errors,
        }
