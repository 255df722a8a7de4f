"""A producer's write: a new flow_run, created once. What `worker-chart-export submit` and the
dev stack do, as any producer of runs would."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker_chart_export.core.exceptions import UsageError
from worker_chart_export.core.flow.flow_rules import as_new_run
from worker_chart_export.core.naming import FLOW_RUNS_COLLECTION

if TYPE_CHECKING:
    from google.cloud import firestore

    from worker_chart_export.core.documents import FlowRunDocument

_RPC_SECONDS = 10.0


def create_flow_run(client: firestore.Client, document: FlowRunDocument) -> str:
    """`flow_runs/{runId}` created as a new run (status PENDING), only if it does not exist:
    its creation is the event advance_flow starts the run from. Returns the runId."""
    from google.api_core.exceptions import AlreadyExists, Conflict

    run_id = str(document["runId"])
    reference = client.collection(FLOW_RUNS_COLLECTION).document(run_id)
    try:
        # not retried: a retry after a lost answer would report our own creation as a conflict
        reference.create(dict(as_new_run(document)), retry=None, timeout=_RPC_SECONDS)
    except (AlreadyExists, Conflict):
        raise UsageError(
            f"{FLOW_RUNS_COLLECTION}/{run_id} already exists: a run is created once; pick another --run-id"
        ) from None
    return run_id
