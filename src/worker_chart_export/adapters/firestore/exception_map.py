"""The one place that maps Firestore client exceptions to ours.

- contention (`Aborted`, or the client's "Failed to commit transaction in N attempts"): the
  transaction lost to concurrent writers;
- unavailability (5xx, timeouts, the api_core retry giving up, gRPC UNAVAILABLE, a token
  refresh that could not reach the metadata server): worth a retry by the caller.
The client hides the real cause when a transaction cannot even begin: it raises
`ValueError("... cannot be rolled back")` with the RPC error as `__context__`, so the whole
exception chain is inspected, not just the top.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from worker_chart_export.core.exceptions import TransientStoreError

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.InternalServerError,
    api_exceptions.ResourceExhausted,
    api_exceptions.RetryError,
    auth_exceptions.TransportError,
)
_TRANSIENT_GRPC_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
_GAVE_UP_PREFIX = "Failed to commit transaction"
_MAX_MESSAGE_CHARS = 200


# A conditional commit refused because a document changed (or went) since the version it
# names, or aborted by contention on a hot document: either way, read again and plan again.
CHANGED_MEANWHILE: tuple[type[Exception], ...] = (
    api_exceptions.FailedPrecondition,
    api_exceptions.NotFound,
    api_exceptions.Aborted,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_contention(exc: BaseException) -> bool:
    """The transaction lost to concurrent writers (and the client may have given up retrying)."""
    return any(
        isinstance(e, api_exceptions.Aborted)
        or (isinstance(e, ValueError) and str(e).startswith(_GAVE_UP_PREFIX))
        for e in _chain(exc)
    )


def _transient_cause(exc: BaseException) -> BaseException | None:
    for e in _chain(exc):
        if isinstance(e, _TRANSIENT_TYPES):
            return e
        code = getattr(e, "code", None)
        if isinstance(e, grpc.RpcError) and callable(code) and code() in _TRANSIENT_GRPC_CODES:
            return e
    return None


def is_transient(exc: BaseException) -> bool:
    return _transient_cause(exc) is not None


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[: _MAX_MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def outage_error(exc: BaseException, operation: str) -> TransientStoreError | None:
    """`exc` as an outage of `operation`, or None when it is not one."""
    cause = _transient_cause(exc)
    if cause is None:
        return None
    return TransientStoreError(f"{operation}: Firestore unavailable ({_describe(cause)})")


def store_error(exc: BaseException, operation: str) -> TransientStoreError | None:
    """Contention the client gave up on, or an outage: both worth a retry by the caller."""
    if is_contention(exc):
        return TransientStoreError(f"{operation}: gave up on contention")
    return outage_error(exc, operation)


@contextmanager
def translated(operation: str, *, contention: bool = True) -> Iterator[None]:
    """Raise our TransientStoreError for an outage (and, with `contention`, for contention
    the client gave up on) inside the block; anything else propagates unchanged."""
    try:
        yield
    except Exception as exc:
        mapped = store_error(exc, operation) if contention else outage_error(exc, operation)
        if mapped is None:
            raise
        raise mapped from exc
