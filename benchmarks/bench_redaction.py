"""Per-line cost of the log exit's redaction (logs.py's `_without_keys`, core/redaction.py).

Writes the same log line, the worker's "chart api call finished" with its usual fields,
through the configured structlog chain, N times per case, the cases interleaved in rounds:
- none: no key known (the redaction returns at once: the baseline);
- keys: K keys known (printable, 40 characters), a line without any of them (the common case:
  one sieve over the rendered line);
- hit: the same keys, the line carrying one of them URL-encoded (decoded, found, redacted
  value by value, rendered again).
Prints the median µs per line of each case and the added cost over the baseline.

    .venv/bin/python benchmarks/bench_redaction.py [--lines 2000] [--keys 5] [--rounds 7]
"""

from __future__ import annotations

import argparse
import io
import secrets
import statistics
import time
from urllib.parse import quote

from worker_chart_export import known_keys
from worker_chart_export.logs import configure_logging, get_logger


def _line(log: object, extra: str | None) -> None:
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


def _per_line(lines: int, extra: str | None) -> float:
    began = time.perf_counter()
    for _ in range(lines):
        _line(None, extra)
    return (time.perf_counter() - began) / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    keys = [secrets.token_urlsafe(30)[:40] for _ in range(args.keys)]
    configure_logging(service="bench", env="bench", stream=io.StringIO())
    results: dict[str, list[float]] = {"none": [], "keys": [], "hit": []}
    for _ in range(args.rounds):
        known_keys.forget_all()
        results["none"].append(_per_line(args.lines, None))
        known_keys.learn(keys)
        results["keys"].append(_per_line(args.lines, None))
        results["hit"].append(_per_line(args.lines, f"invalid key {quote(keys[0], safe='')}"))
    base = statistics.median(results["none"])
    for case, values in results.items():
        median = statistics.median(values)
        print(f"{case:>5}: {median:7.1f} µs/line  (+{median - base:5.1f} µs over no key known)")


if __name__ == "__main__":
    main()
