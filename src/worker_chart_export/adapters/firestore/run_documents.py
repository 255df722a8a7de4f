"""A flow_run document and its steps' lease documents, as the claim and the finalize write
them: the field paths of a core plan, the lease's fields, the versions this store wrote last,
and the one conditional commit every write of a step goes through (no transaction, no lock)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from worker_chart_export.adapters.firestore.client import BatchCommitter, RpcOptions, Version, version_of
from worker_chart_export.adapters.firestore.exception_map import CHANGED_MEANWHILE
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.naming import lease_document_id
from worker_chart_export.core.step.step_rules import ClaimPlan, FinalizePlan

# what a store's commit adds to the batch besides the run document's update
BatchWrites = Callable[[firestore.WriteBatch], None]

REMEMBERED_RUNS = 1024


def step_field(step_id: str, *fields: str) -> str:
    # FieldPath quotes ids with '-', '.', spaces or backticks; a dotted string would split them.
    return FieldPath("steps", step_id, *fields).to_api_repr()


def claim_update(plan: ClaimPlan) -> dict[str, Any]:
    fields: dict[str, Any] = {step_field(plan.step_id, k): v for k, v in plan.set_fields.items()}
    fields.update({step_field(plan.step_id, k): firestore.DELETE_FIELD for k in plan.delete_fields})
    return fields


def finalize_update(plan: FinalizePlan) -> dict[str, Any]:
    fields: dict[str, Any] = {step_field(plan.step_id, k): v for k, v in plan.set_fields.items()}
    if plan.delete_error:
        fields[step_field(plan.step_id, "error")] = firestore.DELETE_FIELD
    # merged key by key: outputs other workers or earlier attempts wrote stay in place
    fields.update({step_field(plan.step_id, "outputs", k): v for k, v in plan.set_outputs.items()})
    return fields


def advance_update(plan: AdvancePlan) -> dict[str, Any]:
    return {FieldPath(*parts).to_api_repr(): value for parts, value in plan.updates().items()}


class WrittenVersions:
    """The version of each run document this store wrote last (its claims), so the finalize
    can write on it without reading first. Bounded: a step that never finalizes (a crash)
    must not keep its entry for ever; a forgotten entry only costs a read."""

    def __init__(self, capacity: int = REMEMBERED_RUNS) -> None:
        self._capacity = capacity
        self._versions: OrderedDict[str, Version] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, run_id: str, version: Version) -> None:
        with self._lock:
            self._versions[run_id] = version
            self._versions.move_to_end(run_id)
            while len(self._versions) > self._capacity:
                self._versions.popitem(last=False)

    def recall(self, run_id: str) -> Version | None:
        with self._lock:
            return self._versions.get(run_id)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._versions.pop(run_id, None)


@dataclass
class RunDocuments:
    """Where a store's claims and finalizes write: the run and lease collections, the RPC
    bounds, the commit seam (tests inject lost answers and outages there) and the versions
    written last."""

    client: firestore.Client
    runs: firestore.CollectionReference
    leases: firestore.CollectionReference
    rpc: RpcOptions
    commit: BatchCommitter
    written: WrittenVersions = field(default_factory=WrittenVersions)

    def run_ref(self, run_id: str) -> firestore.DocumentReference:
        return self.runs.document(run_id)

    def lease_ref(self, run_id: str, step_id: str) -> firestore.DocumentReference:
        return self.leases.document(lease_document_id(run_id, step_id))

    def read_version(self, ref: firestore.DocumentReference) -> Version:
        return version_of(self.rpc.get(ref))

    def commit_on(
        self, version: Version, ref: firestore.DocumentReference, fields: dict[str, Any], also: BatchWrites
    ) -> Any:
        """`fields` onto the run document only if it is still `version`, with what `also` adds,
        in one commit: the update time it gave the document, or None when the document changed
        (or went) meanwhile. Outages are raised as they come."""
        batch = self.client.batch()
        batch.update(ref, fields, option=self.client.write_option(last_update_time=version.update_time))
        also(batch)
        try:
            results = self.commit(batch, self.rpc)
        except CHANGED_MEANWHILE:
            return None
        return results[0].update_time
