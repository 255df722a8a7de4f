"""In memory: the accounts' usage documents as one dict, the tests' UsageStore. The
operations are adapters/usage_local.py's DocsUsageStore (the same pure window rules as the
Firestore store), which run-local's file store loads and saves around."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from worker_chart_export.adapters.usage_local import Docs, DocsUsageStore


class InMemoryUsageStore(DocsUsageStore):
    def __init__(self, docs: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._docs: Docs = {k: dict(v) for k, v in (docs or {}).items()}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Docs]:
        with self._lock:
            yield self._docs

    def snapshot(self) -> Docs:
        with self._lock:
            return copy.deepcopy(self._docs)
