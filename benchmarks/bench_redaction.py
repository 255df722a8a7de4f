"""Per-line cost of the log exit's redaction (logs.py's `_without_keys`, core/redaction.py),
and of the served process's streams (cli/output.py's RedactingWriter, which `serve` runs in).

Writes the same log line, the worker's "chart api call finished" with its usual fields,
through the configured structlog chain, N times per case, the cases interleaved in rounds:
- none: no key known (the redaction returns at once: the baseline);
- keys: K keys known (printable, 40 characters), a line without any of them (the common case:
  one sieve over the rendered line);
- hit: the same keys, the line carrying one of them URL-encoded (decoded, found, redacted
  value by value, rendered again);
- twice: as keys, but written through the RedactingWriter, as `serve`'s wrapped streams would
  (sieved a second time, whole): the cost `serve` avoids by writing logs.py's lines to the
  stream under the wrapper (cli/output.unwrapped), so `keys` is what a served line costs;
and a stdlib logging line (gunicorn's refusal, about 100 characters) through a StreamHandler:
- stdlib: on the stream itself, K keys known (what `serve` wrote before its streams were wrapped);
- stdlib served: through the RedactingWriter, as `serve` writes it now.
Prints the median µs per line of each case and the added cost over its baseline.

    .venv/bin/python benchmarks/bench_redaction.py [--lines 2000] [--keys 5] [--rounds 7]
"""

from __future__ import annotations

import argparse
import io
import logging
import secrets
import statistics
import time
from collections.abc import Callable
from urllib.parse import quote

from worker_chart_export import known_keys
from worker_chart_export.cli.output import RedactingWriter
from worker_chart_export.logs import configure_logging, get_logger


def _line(extra: str | None) -> None:
    get_logger().info(
        "chart api call finished",
        runId="run_20261122_btcusdt_0001",
        stepId="charts_1h",
        chartTemplateId="price_psar_adi_v1",
        chartsApi={"mode": "real", "fixtureKey": "BINANCE_BTCUSDT__1h__price_psar_adi_v1"},
        accountId="acc1",
        attempt=1,
        status="failed" if extra else "succeeded",
        durationMs=812.4,
        error={"code": "CHART_API_FAILED", "message": f"CHART-IMG answered HTTP 401: {extra}"}
        if extra
        else None,
    )


def _per_line(lines: int, write: Callable[[], None]) -> float:
    began = time.perf_counter()
    for _ in range(lines):
        write()
    return (time.perf_counter() - began) / lines * 1e6


def _stdlib_logger(stream: io.StringIO | RedactingWriter) -> logging.Logger:
    logger = logging.getLogger(f"bench.{type(stream).__name__}")
    logger.propagate = False
    logger.handlers = [logging.StreamHandler(stream)]  # type: ignore[arg-type]
    return logger


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    keys = [secrets.token_urlsafe(30)[:40] for _ in range(args.keys)]
    sink = io.StringIO()
    served = RedactingWriter(sink)
    plain, wrapped = _stdlib_logger(sink), _stdlib_logger(served)
    hit = f"invalid key {quote(keys[0], safe='')}"
    refusal = "Invalid request from ip=10.1.2.3: Invalid HTTP request line: '/run_20261122_btcusdt_0001/x'"
    results: dict[str, list[float]] = {
        name: [] for name in ("none", "keys", "hit", "twice", "stdlib", "stdlib served")
    }
    for _ in range(args.rounds):
        known_keys.forget_all()
        configure_logging(service="bench", env="bench", stream=sink)
        results["none"].append(_per_line(args.lines, lambda: _line(None)))
        known_keys.learn(keys)
        results["keys"].append(_per_line(args.lines, lambda: _line(None)))
        results["hit"].append(_per_line(args.lines, lambda: _line(hit)))
        results["stdlib"].append(_per_line(args.lines, lambda: plain.warning(refusal)))
        results["stdlib served"].append(_per_line(args.lines, lambda: wrapped.warning(refusal)))
        configure_logging(service="bench", env="bench", stream=served)  # type: ignore[arg-type]
        results["twice"].append(_per_line(args.lines, lambda: _line(None)))
        sink.seek(0)
        sink.truncate()
    baselines = {"none": "none", "keys": "none", "hit": "none", "twice": "keys"}
    baselines |= {"stdlib": "stdlib", "stdlib served": "stdlib"}
    for case, values in results.items():
        median, base = statistics.median(values), statistics.median(results[baselines[case]])
        print(f"{case:>13}: {median:7.1f} µs/line  (+{median - base:5.1f} µs over {baselines[case]})")


if __name__ == "__main__":
    main()
