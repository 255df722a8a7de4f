"""Per-event cost of the no-op path vs. a CloudEvent function that does nothing.

Builds a 200-step flow_run with no READY CHART_EXPORT step, as an update event with value
and oldValue: ~45 KB of protobuf DocumentEventData. Two documents:
- busy (the default target): READY steps of other types and finished CHART_EXPORT steps,
  so both words occur and the filter has to look at every step;
- quiet: no step is READY at all (the common case: our own claim/finalize writes, most
  writes of other workers), where the filter skips the per-step scan.
Serves `on_flow_run_updated` and a bare CloudEvent function (same payload, does nothing)
the same way, posts the same binary-mode protobuf CloudEvent to each, interleaved, N times
after a warm-up, and prints p50/p90 per event and the p50 ratio (target <= 1.2). Two
transports:
- test-client: functions-framework apps in-process through the WSGI test client (the
  smallest floor, so the strictest ratio);
- gunicorn: each app in its own process behind functions-framework's production server
  (gunicorn, gthread), as Cloud Run runs it, over keep-alive HTTP on 127.0.0.1.

    .venv/bin/python benchmarks/bench_noop_path.py [--events 300] [--transport both]
                                                   [--document both]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from worker_chart_export.functions.serve import FUNCTION_TARGET
from worker_chart_export.testing import build_document_event_data, document_resource_name

TARGET_RATIO = 1.2
STEPS = 200
RUN_ID = "run_20261122_btcusdt_0001"
BARE_FUNCTION_SOURCE = '''
import functions_framework


@functions_framework.cloud_event
def bare(cloud_event):
    """Receives the same event and does nothing: the floor any function pays."""
'''
# Each server runs exactly as `run_server` would; the bare one through the same
# functions-framework calls, so the two differ only in the function they serve.
SERVE_OURS = (
    "import sys; from worker_chart_export.functions.serve import run_server; "
    "run_server(int(sys.argv[1]), host='127.0.0.1')"
)
SERVE_BARE = (
    "import sys, functions_framework; from functions_framework._http import create_server; "
    "app = functions_framework.create_app(target='bare', source=sys.argv[2], "
    "signature_type='cloudevent'); create_server(app, False).run('127.0.0.1', int(sys.argv[1]))"
)

Post = Callable[[], int]


DOCUMENT_STATUSES = {
    "busy": ("SUCCEEDED", "READY", "PENDING", "RUNNING"),
    "quiet": ("SUCCEEDED", "PENDING", "RUNNING", "SUCCEEDED"),
}


def flow_run_with_no_ready_chart_export(document: str, steps: int = STEPS) -> dict[str, Any]:
    """CHART_EXPORT steps that are not READY among steps of other types (READY ones in the
    busy document). With value and oldValue the event is ~45 KB of protobuf."""
    step_types = ("CHART_EXPORT", "LLM_REPORT", "OHLCV_EXPORT")
    statuses = DOCUMENT_STATUSES[document]
    all_steps: dict[str, Any] = {}
    for index in range(steps):
        step_type = step_types[index % len(step_types)]
        status = statuses[index % len(statuses)]
        if step_type == "CHART_EXPORT" and status == "READY":
            status = "SUCCEEDED"
        all_steps[f"step_{index:03d}"] = {
            "stepType": step_type,
            "status": status,
            "timeframe": "1h",
            "dependsOn": [f"step_{index - 1:03d}"] if index else [],
        }
    return {
        "runId": RUN_ID,
        "flowKey": "daily_crypto_report",
        "status": "RUNNING",
        "scope": {"symbol": "BTCUSDT"},
        "steps": all_steps,
    }


def event_body_and_headers(document: str = "busy") -> tuple[bytes, dict[str, str]]:
    name = document_resource_name("demo-project", f"flow_runs/{RUN_ID}")
    fields = flow_run_with_no_ready_chart_export(document)
    body = build_document_event_data(name, fields, fields).SerializeToString()
    headers = {
        "ce-id": "bench-1",
        "ce-source": "//firestore.googleapis.com/projects/demo-project/databases/(default)",
        "ce-type": "google.cloud.firestore.document.v1.updated",
        "ce-specversion": "1.0",
        "ce-subject": f"documents/flow_runs/{RUN_ID}",
        "ce-document": f"flow_runs/{RUN_ID}",
        "content-type": "application/protobuf",
    }
    return body, headers


def write_bare_function(directory: Path) -> Path:
    source = directory / "bare_function.py"
    source.write_text(textwrap.dedent(BARE_FUNCTION_SOURCE))
    return source


@contextmanager
def test_client_posters(
    bare_source: Path, body: bytes, headers: dict[str, str]
) -> Iterator[tuple[Post, Post]]:
    import functions_framework

    from worker_chart_export.functions.serve import create_function_app
    from worker_chart_export.logs import configure_logging

    def poster(app: Any) -> Post:
        client = app.test_client()
        return lambda: client.post("/", data=body, headers=headers).status_code

    # Our lines are rendered as in production, then dropped: the terminal is not measured.
    with open(os.devnull, "w") as devnull:
        configure_logging(service="worker-chart-export", env="bench", stream=devnull)
        bare_app = functions_framework.create_app(
            target="bare", source=str(bare_source), signature_type="cloudevent"
        )
        yield poster(create_function_app()), poster(bare_app)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(code: str, *args: str) -> Iterator[int]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", code, str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"server for {code!r} did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        server.terminate()  # gunicorn's arbiter stops its worker on SIGTERM
        server.wait(timeout=30)


def http_poster(port: int, body: bytes, headers: dict[str, str]) -> Post:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post() -> int:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status

    return post


@contextmanager
def gunicorn_posters(bare_source: Path, body: bytes, headers: dict[str, str]) -> Iterator[tuple[Post, Post]]:
    with served(SERVE_OURS) as ours_port, served(SERVE_BARE, str(bare_source)) as bare_port:
        yield http_poster(ours_port, body, headers), http_poster(bare_port, body, headers)


def timed_ms(post: Post) -> float:
    started = time.perf_counter()
    status = post()
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        raise SystemExit(f"unexpected HTTP {status}")
    return elapsed


def measure(ours: Post, bare: Post, events: int, warmup: int) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        timed_ms(ours)
        timed_ms(bare)
    ours_ms, bare_ms = [], []
    for _ in range(events):  # interleaved, so background load hits both alike
        ours_ms.append(timed_ms(ours))
        bare_ms.append(timed_ms(bare))
    return ours_ms, bare_ms


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(label: str, ours_ms: list[float], bare_ms: list[float]) -> float:
    print(f"[{label}]")
    for name, values in ((FUNCTION_TARGET, ours_ms), ("bare function", bare_ms)):
        print(
            f"  {name:>20}: p50 {statistics.median(values):6.3f} ms   "
            f"p90 {percentile(values, 0.9):6.3f} ms   min {min(values):6.3f} ms"
        )
    ratio = statistics.median(ours_ms) / statistics.median(bare_ms)
    verdict = "OK" if ratio <= TARGET_RATIO else "OVER TARGET"
    # min/min is less sensitive to other load on the machine; the target is on p50
    print(
        f"  ratio p50 ours/bare: {ratio:.2f} (target <= {TARGET_RATIO}) {verdict}   "
        f"[min/min {min(ours_ms) / min(bare_ms):.2f}, "
        f"p50 overhead {statistics.median(ours_ms) - statistics.median(bare_ms):.3f} ms]"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--transport", choices=("test-client", "gunicorn", "both"), default="both")
    parser.add_argument("--document", choices=(*DOCUMENT_STATUSES, "both"), default="both")
    args = parser.parse_args()

    transports = ("test-client", "gunicorn") if args.transport == "both" else (args.transport,)
    documents = tuple(DOCUMENT_STATUSES) if args.document == "both" else (args.document,)
    print(
        f"{STEPS} steps, no READY CHART_EXPORT step; {args.events} events per function "
        f"after {args.warmup} warm-up, interleaved"
    )
    with tempfile.TemporaryDirectory() as tmp:
        bare_source = write_bare_function(Path(tmp))
        for document in documents:
            body, headers = event_body_and_headers(document)
            for transport in transports:
                factory = test_client_posters if transport == "test-client" else gunicorn_posters
                with ExitStack() as stack:
                    ours, bare = stack.enter_context(factory(bare_source, body, headers))
                    label = f"{document} document, {len(body)} bytes, {transport}"
                    report(label, *measure(ours, bare, args.events, args.warmup))


if __name__ == "__main__":
    main()
