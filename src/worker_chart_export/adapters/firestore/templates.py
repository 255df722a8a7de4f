"""TemplateSource over `chart_templates/{id}`: read for each step (one BatchGet), so a template
edited in Firestore is what the next claim uses; each stored version is checked once
(core.templates.template_check.StoredTemplate, kept while update_time stays). A TTL may be set
to read less often (tests); the worker sets none."""

from __future__ import annotations

import threading
from collections.abc import Sequence
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
from worker_chart_export.core.templates.template_check import StoredTemplate, TemplateCheck, template_problems


class FirestoreTemplateSource:
    """With a TTL, missing templates are cached as missing for the same TTL, so a template
    synced later shows up within `ttl_seconds`. Ids that are not safe path segments are never looked up
    (they could not be valid template ids, and '/' would address another collection).
    After the TTL a template is read again; while its update_time is the one seen before,
    the StoredTemplate already returned (and its check) is kept: `check` runs once per version.
    """

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = CHART_TEMPLATES_COLLECTION,
        ttl_seconds: float = 0.0,
        clock: Clock,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SECONDS,
        check: TemplateCheck = template_problems,
    ) -> None:
        self._client = client
        self._collection = client.collection(collection)
        self._ttl = ttl_seconds
        self._clock = clock
        self._rpc = RpcOptions(rpc_timeout)
        self._check = check
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, StoredTemplate | None]] = {}  # id -> (expires, version)

    def get_templates(self, template_ids: Sequence[str]) -> dict[str, StoredTemplate]:
        wanted = [t for t in dict.fromkeys(template_ids) if is_safe_segment(t)]
        now = self._clock.monotonic()
        with self._lock:
            known = {t: self._cache[t] for t in wanted if t in self._cache and self._cache[t][0] > now}
        stale = [t for t in wanted if t not in known]
        if stale:
            # fetched outside the lock: a slow RPC must not block readers of cached entries
            fetched = self._fetch(stale)
            expires = now + self._ttl
            with self._lock:
                entries = {t: (expires, self._same_or_new(t, fetched.get(t))) for t in stale}
                self._cache.update(entries)
            known.update(entries)
        # StoredTemplate hands out copies of its document: callers cannot alter the cache
        return {t: stored for t in wanted if (stored := known[t][1]) is not None}

    def _same_or_new(
        self, template_id: str, fetched: tuple[Any, dict[str, Any]] | None
    ) -> StoredTemplate | None:
        """The version already known when update_time did not move (its check is kept)."""
        if fetched is None:
            return None
        revision, document = fetched
        cached = self._cache.get(template_id)
        if cached is not None and cached[1] is not None and cached[1].revision == revision:
            return cached[1]
        return StoredTemplate(template_id, document, revision, check=self._check)

    def _fetch(self, template_ids: list[str]) -> dict[str, tuple[Any, dict[str, Any]]]:
        """id -> (update_time, document) of the templates that exist."""
        refs = [self._collection.document(t) for t in template_ids]
        with translated(f"read of chart_templates {', '.join(template_ids)}", contention=False):
            snapshots = self._rpc.get_all(self._client, refs)
        return {s.id: (s.update_time, doc) for s in snapshots if (doc := snapshot_dict(s)) is not None}
