"""A gRPC server on 127.0.0.1 that takes the first call and never answers it: a Firestore
that hangs. A later call is refused at once (PERMISSION_DENIED, which no client retries), so a
client that would have waited longer than its first deadline ends quickly, and shows it.

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
from typing import Any

import grpc

# A client that put no deadline on its call (or a long one) gets a refusal after this long, so
# a test of a missing deadline fails in a minute instead of hanging.
HOLD_AT_MOST_SECONDS = 60.0


@dataclass(frozen=True)
class HeldCall:
    method: str  # e.g. /google.firestore.v1.Firestore/BatchGetDocuments
    seconds_left: float | None  # the client's deadline as it arrived (None: it set none)


@dataclass
class SilentServer:
    host: str
    calls: list[HeldCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, call: HeldCall) -> bool:
        """Records `call`; True when it is the first."""
        with self._lock:
            self.calls.append(call)
            return len(self.calls) == 1


class _Hold(grpc.GenericRpcHandler):
    def __init__(self, server: SilentServer) -> None:
        self._server = server

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        method = handler_call_details.method

        def hold(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            if not self._server.record(HeldCall(method, context.time_remaining())):
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "silent_grpc: only the first call is held")
            held = threading.Event()
            context.add_callback(held.set)  # the client gave up (or the server stops)
            if not held.wait(HOLD_AT_MOST_SECONDS):
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "silent_grpc: held a minute")
            yield from ()

        return grpc.unary_stream_rpc_method_handler(hold)


@contextmanager
def silent_grpc_server() -> Iterator[SilentServer]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    port = server.add_insecure_port("127.0.0.1:0")
    silent = SilentServer(f"127.0.0.1:{port}")
    server.add_generic_rpc_handlers((_Hold(silent),))
    server.start()
    try:
        yield silent
    finally:
        server.stop(grace=None)
