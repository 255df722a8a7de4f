"""The claim of a step (READY -> RUNNING) as compare-and-sets on the run document.

The claim plans from the version its caller saw (the event's), else from a read: ONE commit
when the event is current. When the commit loses its precondition the document is read at
once: the step RUNNING under another token (the race was lost) or gone is the no-op it always
was, RUNNING under ours is our commit (its answer lost); only a step still READY (another
write of the run came first) is tried again, a few times with jitter, and then raises
ClaimContended (the service asks for a redelivery). An outage is settled the same way, by
reading back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt

from worker_chart_export.adapters.firestore.client import Version, plain
from worker_chart_export.adapters.firestore.exception_map import outage_error, translated
from worker_chart_export.adapters.firestore.run_documents import RunDocuments, claim_update
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.documents import as_flow_run
from worker_chart_export.core.exceptions import ClaimContended, TransientStoreError
from worker_chart_export.core.step.reaping import lease_document
from worker_chart_export.core.step.step_rules import (
    ClaimPlan,
    RunVersion,
    claim_retry_wait,
    plan_claim,
    settled_claim,
)
from worker_chart_export.core.types import ClaimResult, ClaimStatus


@dataclass(frozen=True)
class ClaimRequest:
    """One claim's inputs, and the core's rules applied to them."""

    run_id: str
    step_id: str
    token: str
    now: datetime
    lease_expires_at: datetime

    def plan(self, document: Mapping[str, Any] | None) -> ClaimPlan | ClaimResult:
        return plan_claim(as_flow_run(document), self.run_id, self.step_id, **self._claim())

    def settled(self, document: Mapping[str, Any] | None) -> ClaimResult | None:
        return settled_claim(as_flow_run(document), self.run_id, self.step_id, **self._claim())

    def _claim(self) -> dict[str, Any]:
        return {"token": self.token, "now": self.now, "lease_expires_at": self.lease_expires_at}

    @property
    def operation(self) -> str:
        return f"claim of step {self.step_id} in flow_runs/{self.run_id}"


@dataclass(frozen=True)
class StepClaim:
    """Claims on `docs`: `tries` commits at most while the step stays READY, waiting on `clock`."""

    docs: RunDocuments
    tries: int
    clock: Clock

    def claim(self, request: ClaimRequest, seen: RunVersion | None) -> ClaimResult:
        ref = self.docs.run_ref(request.run_id)
        # the event's document, in the values a read gives; without one, read first
        version = Version(plain(seen.document), seen.update_time) if seen is not None else None

        def one_try() -> ClaimResult | None:
            nonlocal version
            if version is None:
                version = self._read_for(request, ref, "read")
            outcome, version = self._claim_on(version, ref, request)
            return outcome

        retrying = Retrying(
            stop=stop_after_attempt(self.tries),
            wait=claim_retry_wait(),
            retry=retry_if_result(lambda outcome: outcome is None),
            sleep=self.clock.sleep,
            retry_error_callback=_still_ready,
        )
        outcome: ClaimResult | None = retrying(one_try)
        if outcome is None:
            raise ClaimContended(
                f"{request.operation}: the step is still READY after {self.tries} commits "
                "that lost to other writes of the run"
            )
        return outcome

    def _claim_on(
        self, version: Version, ref: firestore.DocumentReference, request: ClaimRequest
    ) -> tuple[ClaimResult | None, Version | None]:
        """One claim commit planned from `version`: (the outcome, None) once settled, else
        (None, the version read after the commit lost: the step is still READY in it)."""
        plan = request.plan(version.doc)
        if isinstance(plan, ClaimResult):
            return plan, None
        lease = self.docs.lease_ref(request.run_id, request.step_id)
        try:
            written = self.docs.commit_on(
                version, ref, claim_update(plan), lambda b: b.set(lease, lease_document(request.run_id, plan))
            )
        except Exception as exc:
            outage = outage_error(exc, request.operation)
            if outage is None:
                raise
            # Did our commit land although its answer was lost? Then only this invocation
            # can finish the step: a redelivery would find it RUNNING and do nothing.
            return self._settled_after_outage(ref, request, outage), None
        if written is not None:
            self.docs.written.remember(request.run_id, Version(plan.claimed_document, written))
            return plan.outcome(), None
        # Lost: read at once, so a loser of the race learns it without waiting.
        fresh = self._read_for(request, ref, "read after a lost commit")
        outcome = self._settled(request, fresh)
        return outcome, None if outcome is not None else fresh

    def _read_for(self, request: ClaimRequest, ref: firestore.DocumentReference, why: str) -> Version:
        with translated(f"{request.operation} ({why})", contention=False):
            return self.docs.read_version(ref)

    def _settled(self, request: ClaimRequest, fresh: Version) -> ClaimResult | None:
        outcome = request.settled(fresh.doc)
        if outcome is not None and outcome.status is ClaimStatus.CLAIMED:
            self.docs.written.remember(request.run_id, fresh)  # ours: the finalize writes on it
        return outcome

    def _settled_after_outage(
        self, ref: firestore.DocumentReference, request: ClaimRequest, outage: TransientStoreError
    ) -> ClaimResult:
        try:
            fresh = self.docs.read_version(ref)
        except Exception as exc:
            raise outage from exc  # still unreachable: the caller reports the outage
        outcome = self._settled(request, fresh)
        if outcome is None:
            raise outage  # nothing of ours landed and the step is still READY: redeliver
        return outcome


def _still_ready(state: RetryCallState) -> None:
    """Every claim commit lost to another write of the run while the step stayed READY."""
    return None
