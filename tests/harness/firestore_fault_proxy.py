"""A gRPC proxy in front of the Firestore emulator that can fail chosen calls, the way an
outage fails them: the worker points FIRESTORE_EMULATOR_HOST at it, every call is forwarded
to the emulator as raw bytes (metadata and deadline kept), and while a fault is armed the calls
it matches are answered UNAVAILABLE without reaching the emulator.

A fault matches by method (`BatchGetDocuments`, `Commit`, ...) and by bytes of the request (a
document path such as b"/chart_templates/"), so one kind of read can be made to fail while
everything else goes through: what pausing the whole emulator cannot do. A fault may also
lose the answer instead (`lose_answer`): the call reaches the emulator, which does it (a write
lands), and the caller is told UNAVAILABLE, as when a reply is lost on its way back. The calls
it refused are counted: a test judges by them, never by time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from harness.firestore_emulator import FirestoreEmulator, free_port

_SERVICE = "/google.firestore.v1.Firestore/"
# the Firestore methods whose answer is a stream (BatchGetDocuments: get_all; RunQuery: a query)
_STREAMED = frozenset({"BatchGetDocuments", "RunQuery", "RunAggregationQuery"})
_NOT_FORWARDED = ("grpc-", ":")  # the channel sets its own


@dataclass
class Fault:
    method: str
    contains: bytes
    refused: int = 0
    after: bool = False  # the call is done, then its answer lost
    times: int | None = None  # how many calls it takes (None: every one while armed)

    def takes(self) -> bool:
        """Whether this matching call is taken (counted), while `times` allows."""
        if self.times is not None and self.refused >= self.times:
            return False
        self.refused += 1
        return True


@dataclass
class FirestoreFaultProxy:
    emulator: FirestoreEmulator
    port: int = field(default_factory=free_port)
    faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Any = None
    _channel: Any = None

    @property
    def host(self) -> str:
        """What FIRESTORE_EMULATOR_HOST wants."""
        return f"127.0.0.1:{self.port}"

    def fail(self, method: str, contains: bytes) -> Fault:
        """From now on, answer UNAVAILABLE to every `method` call whose request holds `contains`."""
        fault = Fault(method, contains)
        with self._lock:
            self.faults.append(fault)
        return fault

    def lose_answer(self, method: str, contains: bytes, *, times: int | None = 1) -> Fault:
        """The next `times` `method` calls whose request holds `contains` are done by the
        emulator, and their caller answered UNAVAILABLE: a write that landed, its reply lost."""
        fault = Fault(method, contains, after=True, times=times)
        with self._lock:
            self.faults.append(fault)
        return fault

    def heal(self) -> None:
        with self._lock:
            self.faults.clear()

    def start(self) -> FirestoreFaultProxy:
        self._channel = grpc.insecure_channel(self.emulator.host)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self._server.add_insecure_port(self.host)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
        if self._channel is not None:
            self._channel.close()

    def _refusal(self, method: str, request: bytes, *, after: bool = False) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                matches = fault.after == after and fault.method == method and fault.contains in request
                if matches and fault.takes():
                    return fault
        return None


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: FirestoreFaultProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: Any) -> Any:
        path: str = handler_call_details.method
        if not path.startswith(_SERVICE):
            return None
        method = path.removeprefix(_SERVICE)
        proxy = self._proxy

        def forwarded(request: bytes, context: grpc.ServicerContext) -> tuple[dict[str, Any], Any]:
            if proxy._refusal(method, request) is not None:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"fault proxy: {method} refused")
            metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(_NOT_FORWARDED)]
            return {"metadata": metadata, "timeout": context.time_remaining()}, proxy._channel

        if method in _STREAMED:

            def stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                options, channel = forwarded(request, context)
                try:
                    yield from channel.unary_stream(path)(request, **options)
                except grpc.RpcError as error:  # the emulator's own answer, passed on as it is
                    context.abort(error.code(), error.details() or "")

            return grpc.unary_stream_rpc_method_handler(stream)

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            options, channel = forwarded(request, context)
            try:
                answer: bytes = channel.unary_unary(path)(request, **options)
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")
            if proxy._refusal(method, request, after=True) is not None:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"fault proxy: {method} done, its answer lost")
            return answer

        return grpc.unary_unary_rpc_method_handler(unary)
