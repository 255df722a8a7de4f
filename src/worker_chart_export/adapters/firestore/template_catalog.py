"""`chart_templates/` as `templates sync` writes it: what is stored for the templates of a
folder and every id there is, then the changed documents written whole, in batches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.cloud import firestore

from worker_chart_export.adapters.firestore.client import bounded_retry
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.core.naming import CHART_TEMPLATES_COLLECTION

_BATCH_LIMIT = 500  # Firestore's maximum writes per batch
_RPC_TIMEOUT_SECONDS = 30.0


class FirestoreTemplateCatalog:
    """Raises TransientStoreError when Firestore cannot be reached (nothing, or only whole
    batches, written: each batch commits atomically and a re-run finishes the job)."""

    def __init__(self, client: firestore.Client, collection: str = CHART_TEMPLATES_COLLECTION) -> None:
        self.collection = collection
        self._client = client
        self._retry = bounded_retry(_RPC_TIMEOUT_SECONDS)

    def stored(self, template_ids: Sequence[str]) -> tuple[dict[str, Any], set[str]]:
        """The stored documents of `template_ids` (those that exist), and every stored id."""
        ref_of = self._client.collection(self.collection)
        with translated(f"read of {self.collection}", contention=False):
            stored = {
                s.id: s.to_dict()
                for s in self._client.get_all(
                    [ref_of.document(i) for i in template_ids],
                    retry=self._retry,
                    timeout=_RPC_TIMEOUT_SECONDS,
                )
                if s.exists
            }
            stored_ids = {
                ref.id for ref in ref_of.list_documents(retry=self._retry, timeout=_RPC_TIMEOUT_SECONDS)
            }
        return stored, stored_ids

    def write(self, documents: Mapping[str, Any]) -> None:
        """Each document overwritten whole (its id: the key), at most a batch at a time."""
        ref_of = self._client.collection(self.collection)
        ids = list(documents)
        with translated(f"write of {self.collection}", contention=False):
            for start in range(0, len(ids), _BATCH_LIMIT):
                batch = self._client.batch()
                for template_id in ids[start : start + _BATCH_LIMIT]:
                    batch.set(ref_of.document(template_id), documents[template_id])  # full overwrite
                batch.commit(retry=self._retry, timeout=_RPC_TIMEOUT_SECONDS)
