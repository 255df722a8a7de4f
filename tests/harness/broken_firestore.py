"""A gRPC server on 127.0.0.1 standing in for a Firestore that does not work, in one of two
ways: it hangs (takes the first call and never answers it; a later call is refused at once
with PERMISSION_DENIED, which no client retries, so a client that would have waited past its
first deadline ends quickly and shows it), or it is unavailable (answers every call
UNAVAILABLE, as a host nobody listens on does).

It records what each call carried (the method, and the deadline the client put on it), so a
test judges how long a client is willing to wait by what the client sent, not by a clock:
a call that arrives with 5 s left was given 5 s, however busy the machine is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc

# A client that put no deadline on its call (or a long one) gets a refusal after this long, so
# a test of a missing deadline fails in a minute instead of hanging.
HOLD_AT_MOST_SECONDS = 60.0

Failure = Literal["hangs", "unavailable"]


@dataclass(frozen=True)
class ReceivedCall:
    method: str  # e.g. /google.firestore.v1.Firestore/BatchGetDocuments
    deadline: float | None  # seconds the client left the call, as it arrived (None: no deadline)


@dataclass
class BrokenFirestore:
    host: str
    failure: Failure
    calls: list[ReceivedCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def gave_up_within(self, seconds: float) -> bool:
        """Every call carried a deadline of at most `seconds` (plus the few milliseconds the
        grpc-timeout header rounds up), and the calls stopped as a retry policy of that length
        stops: one of `seconds` from a 0.1 s backoff sends about eight calls in 2 s, the
        library's own (60 s) well over a hundred."""
        deadlines = [call.deadline for call in self.calls]
        carried = all(left is not None and left <= seconds + 0.1 for left in deadlines)
        return carried and 0 < len(deadlines) < 10 * seconds

    def record(self, call: ReceivedCall) -> int:
        """Records `call`; how many calls there were, this one included."""
        with self._lock:
            self.calls.append(call)
            return len(self.calls)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, server: BrokenFirestore) -> None:
        self._server = server

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        method = handler_call_details.method

        def answer(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            number = self._server.record(ReceivedCall(method, context.time_remaining()))
            if self._server.failure == "unavailable":
                context.abort(grpc.StatusCode.UNAVAILABLE, "broken_firestore: unavailable")
            if number > 1:
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED, "broken_firestore: only the first call is held"
                )
            held = threading.Event()
            context.add_callback(held.set)  # the client gave up (or the server stops)
            if not held.wait(HOLD_AT_MOST_SECONDS):
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "broken_firestore: held a minute")
            yield from ()

        return grpc.unary_stream_rpc_method_handler(answer)


@contextmanager
def broken_firestore(failure: Failure) -> Iterator[BrokenFirestore]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    port = server.add_insecure_port("127.0.0.1:0")
    broken = BrokenFirestore(f"127.0.0.1:{port}", failure)
    server.add_generic_rpc_handlers((_Handler(broken),))
    server.start()
    try:
        yield broken
    finally:
        server.stop(grace=None)
