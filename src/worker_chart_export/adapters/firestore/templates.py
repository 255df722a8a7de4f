"""TemplateSource over `chart_templates/{id}`, with a per-instance TTL cache."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from google.cloud import firestore

from worker_chart_export.adapters.firestore.client import (
    DEFAULT_RPC_TIMEOUT_SECONDS,
    RpcOptions,
    snapshot_dict,
)
from worker_chart_export.adapters.firestore.exception_map import translated
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.naming import CHART_TEMPLATES_COLLECTION, is_safe_segment
from worker_chart_export.core.types import JsonDict


class FirestoreTemplateSource:
    """Missing templates are cached as missing for the same TTL, so a template synced later
    shows up within `ttl_seconds`. Ids that are not safe path segments are never looked up
    (they could not be valid template ids, and '/' would address another collection).
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = CHART_TEMPLATES_COLLECTION,
        ttl_seconds: float = 300.0,
        clock: Clock,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._ttl = ttl_seconds
        self._clock = clock
        self._rpc = RpcOptions(rpc_timeout)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, JsonDict | None]] = {}  # id -> (expires, doc)

    def get_templates(self, template_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        wanted = [t for t in dict.fromkeys(template_ids) if is_safe_segment(t)]
        now = self._clock.monotonic()
        with self._lock:
            known = {t: self._cache[t] for t in wanted if t in self._cache and self._cache[t][0] > now}
        stale = [t for t in wanted if t not in known]
        if stale:
            # fetched outside the lock: a slow RPC must not block readers of cached entries
            fetched = self._fetch(stale)
            expires = now + self._ttl
            entries = {t: (expires, fetched.get(t)) for t in stale}
            with self._lock:
                self._cache.update(entries)
            known.update(entries)
        # copies: callers must not be able to alter the cache
        return {t: copy.deepcopy(doc) for t in wanted if (doc := known[t][1]) is not None}

    def _fetch(self, template_ids: list[str]) -> dict[str, JsonDict]:
        refs = [self._collection.document(t) for t in template_ids]
        with translated(f"read of chart_templates {', '.join(template_ids)}", contention=False):
            snapshots = self._rpc.get_all(self._client, refs)
        return {s.id: doc for s in snapshots if (doc := snapshot_dict(s)) is not None}
