"""`worker-chart-export` with every Firestore RPC counted (for the served benchmarks).

    RPC_COUNT_FILE=/tmp/rpcs.txt python benchmarks/rpc_counting_serve.py serve --port 8081

Exactly the CLI (`worker_chart_export.cli.main`), with a gRPC client interceptor on the
channel the Firestore client opens to the emulator: each RPC appends its method name
(`BeginTransaction`, `BatchGetDocuments`, `Commit`, ...) as one line to $RPC_COUNT_FILE, so
the benchmark counts the round trips of one step as the lines it added; an RPC made inside
`claim_step` is written `claim:<method>`, so the claim's own round trips can be told apart.
`--no-warm-up` (before the subcommand) switches the start-up warm-up off, to measure what it saves.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

import grpc


class _CountingInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    def __init__(self, path: str) -> None:
        self._path = path

    def _count(self, details: Any) -> None:
        phase = "claim:" if _inside("claim_step") else ""
        line = (phase + details.method.rsplit("/", 1)[-1] + "\n").encode()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one write per line, appended atomically
        finally:
            os.close(fd)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self._count(details)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        self._count(details)
        return continuation(details, request)


def _inside(function: str) -> bool:
    """Whether the calling thread is inside a call of `function` (the RPC is sent from it)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _install(path: str) -> None:
    plain = grpc.insecure_channel  # the Firestore client's channel to an emulator

    def counted(*args: Any, **kwargs: Any) -> grpc.Channel:
        return grpc.intercept_channel(plain(*args, **kwargs), _CountingInterceptor(path))

    grpc.insecure_channel = counted


def main() -> int:
    path = os.environ.get("RPC_COUNT_FILE")
    if path:
        _install(path)
    argv = sys.argv[1:]
    from worker_chart_export.cli import main as cli

    if argv[:1] == ["--no-warm-up"]:
        argv = argv[1:]
        cli._schedule_warm_up = lambda: None  # type: ignore[attr-defined]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
