"""Firestore adapters: flow_runs claim/finalize, chart templates, CHART-IMG account usage.

Imported only on the work path (never on the no-op path): google.cloud.firestore is
imported at module level in the modules of this package.
"""

from worker_chart_export.adapters.firestore.client import (
    TransactionRunner,
    bounded_retry,
    make_firestore_client,
    run_transaction,
)
from worker_chart_export.adapters.firestore.exception_map import is_contention, is_transient, translated
from worker_chart_export.adapters.firestore.flow_runs import FirestoreFlowRunStore
from worker_chart_export.adapters.firestore.templates import FirestoreTemplateSource
from worker_chart_export.adapters.firestore.usage import FirestoreUsageStore

__all__ = [
    "FirestoreFlowRunStore",
    "FirestoreTemplateSource",
    "FirestoreUsageStore",
    "TransactionRunner",
    "bounded_retry",
    "is_contention",
    "is_transient",
    "make_firestore_client",
    "run_transaction",
    "translated",
]
