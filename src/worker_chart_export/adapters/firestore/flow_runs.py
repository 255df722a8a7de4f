"""FlowRunStore over `flow_runs/{runId}`: executes the core's claim and finalize plans
(core/step/step_rules.py), each as a compare-and-set: no transaction, no read lock on the run
document (error model, "Firestore contention notes"; docs/design.md, "Claim").

A plan is made from one version of the run document and committed, with the step's lease
document, on the condition that the run document is still that version (its
`update_time`). Firestore applies the commit atomically, all its writes or none, and only if
no other write landed in between; contenders wait for nobody and nothing is locked.
The claim is step_claim.py's, the finalize step_finalize.py's, the commit and the field
paths run_documents.py's; here, the store they make together and advance_flow's write.
"""

from __future__ import annotations

from datetime import datetime

from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from worker_chart_export.adapters.firestore import step_finalize
from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    DEFAULT_TRANSACTION_ATTEMPTS,
    BatchCommitter,
    RpcOptions,
    commit_batch,
    snapshot_dict,
)
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.adapters.firestore.run_documents import RunDocuments, advance_update
from worker_chart_export.adapters.firestore.step_claim import ClaimRequest, StepClaim
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.documents import FlowRunDocument, as_flow_run
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.naming import FLOW_RUNS_COLLECTION, STEP_LEASES_COLLECTION
from worker_chart_export.core.retry import CLAIM_COMMITS
from worker_chart_export.core.step.step_rules import RunVersion, claim_is_current
from worker_chart_export.core.types import ClaimResult, FinalizeResult, StepFinal


class FirestoreFlowRunStore:
    """FlowRunStore over `flow_runs/{runId}`; a claim also writes the step's lease into
    `step_leases/{digest}` in the same commit, and its finalize deletes it."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        max_attempts: int = DEFAULT_TRANSACTION_ATTEMPTS,
        claim_tries: int = CLAIM_COMMITS.attempts or 1,
        commit: BatchCommitter = commit_batch,
        clock: Clock,
    ) -> None:
        if max_attempts < 1 or claim_tries < 1:
            raise ValueError("max_attempts and claim_tries must be >= 1")
        self._client = client
        self._docs = RunDocuments(
            client,
            client.collection(FLOW_RUNS_COLLECTION),
            client.collection(STEP_LEASES_COLLECTION),
            RpcOptions(rpc_timeout),
            commit,
        )
        self._max_attempts = max_attempts
        self._claim = StepClaim(self._docs, claim_tries, clock)

    def claim_step(
        self,
        run_id: str,
        step_id: str,
        *,
        token: str,
        now: datetime,
        lease_expires_at: datetime,
        seen: RunVersion | None = None,
    ) -> ClaimResult:
        return self._claim.claim(ClaimRequest(run_id, step_id, token, now, lease_expires_at), seen)

    def finalize_step(self, run_id: str, step_id: str, *, token: str, final: StepFinal) -> FinalizeResult:
        return step_finalize.finalize_step(
            self._docs, run_id, step_id, token=token, final=final, max_attempts=self._max_attempts
        )

    # --- the fence before the manifest, advance_flow's write ---

    def claim_is_current(self, run_id: str, step_id: str, token: str) -> bool:
        with translated(f"check of the claim on step {step_id} in flow_runs/{run_id}", contention=False):
            document = snapshot_dict(self._docs.rpc.get(self._docs.run_ref(run_id)))
        return claim_is_current(as_flow_run(document), step_id, token)

    def write_advance(self, run_id: str, plan: AdvancePlan, *, last_update_time: datetime) -> bool:
        """advance_flow's one write, only onto the version the plan was made from: False when
        the document changed since (a newer event brings the newer version) or is gone."""
        if not plan.changed:
            return False
        option = self._client.write_option(last_update_time=last_update_time)
        try:
            with translated(f"advance of flow_runs/{run_id}", contention=False):
                self._docs.run_ref(run_id).update(advance_update(plan), option=option)
        except (api_exceptions.FailedPrecondition, api_exceptions.NotFound):
            return False
        return True

    def read_version(self, run_id: str) -> tuple[FlowRunDocument, datetime] | None:
        """The document and its update time (what an event would carry); None if absent."""
        with translated(f"read of flow_runs/{run_id}", contention=False):
            snapshot = self._docs.rpc.get(self._docs.run_ref(run_id))
        if not snapshot.exists:
            return None
        return as_flow_run(snapshot.to_dict() or {}), snapshot.update_time
