"""The finalize of a step (RUNNING -> SUCCEEDED/FAILED, its lease deleted) as compare-and-sets
on the run document.

The finalize starts from the version our claim committed (remembered per run), so it is ONE
commit unless another write of the run landed meanwhile; then the document is read, the plan
made again (a refusal is returned as it is) and written on that version. After
`max_attempts` such losses it raises TransientStoreError, which its caller retries within
its budget.
"""

from __future__ import annotations

from typing import Any

from google.cloud import firestore

from worker_chart_export.adapters.firestore.client import Version
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.adapters.firestore.run_documents import BatchWrites, RunDocuments, finalize_update
from worker_chart_export.core.documents import as_flow_run
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.step.reaping import moved_lease
from worker_chart_export.core.step.step_rules import FinalizePlan, finalized, plan_finalize
from worker_chart_export.core.types import FinalizeResult, StepFinal


def finalize_step(
    docs: RunDocuments, run_id: str, step_id: str, *, token: str, final: StepFinal, max_attempts: int
) -> FinalizeResult:
    operation = f"finalize of step {step_id} in flow_runs/{run_id}"
    ref = docs.run_ref(run_id)
    lease = docs.lease_ref(run_id, step_id)
    with translated(operation):
        version, fresh = docs.written.recall(run_id), False
        if version is None:
            version, fresh = docs.read_version(ref), True
        for _ in range(max_attempts):
            decided = plan_finalize(as_flow_run(version.doc), run_id, step_id, token=token, final=final)
            if isinstance(decided, FinalizeResult):
                if fresh:
                    docs.written.forget(run_id)
                    return decided
            elif _finalize_on(docs, version, ref, decided, _lease_write(decided, lease, run_id, token)):
                docs.written.forget(run_id)
                return finalized(step_id)
            version, fresh = docs.read_version(ref), True
    # other workers update the same run document: contention, like an outage, is for
    # the caller to retry within its finalize budget
    raise TransientStoreError(f"{operation}: the document changed under {max_attempts} tries")


def _lease_write(plan: FinalizePlan, lease: Any, run_id: str, token: str) -> BatchWrites:
    """Ours: the step held our token in that version, so its lease goes with it, or, when the
    step waits, moves to the wait's end (the reaper makes it READY then)."""
    if plan.lease_until is None:
        return lambda batch: batch.delete(lease)
    fields = moved_lease(run_id, plan.step_id, token, plan.lease_until)
    return lambda batch: batch.set(lease, fields, merge=True)


def _finalize_on(
    docs: RunDocuments,
    version: Version,
    ref: firestore.DocumentReference,
    plan: FinalizePlan,
    also: BatchWrites,
) -> bool:
    return docs.commit_on(version, ref, finalize_update(plan), also) is not None
