"""A whole step through the SERVED function on the emulators, as a user would run it.

`worker-chart-export serve` (gunicorn, real mode) on the Firestore emulator and
fake-gcs-server, CHART-IMG played by the stand-in in a process of its own answering in
300 ms, 8 accounts with rates far above need. The benchmark writes each flow_run to the
emulator and POSTs its binary protobuf CloudEvent to the instance; the POST returns when the
step is finalized, so its wall time is the step's: claim, templates, charts, PNG writes,
manifest, finalize. Every Firestore RPC the instance makes is counted by a gRPC interceptor
(benchmarks/rpc_counting_serve.py). Printed, in one run:

- floor: 8 bare concurrent posts to the stand-in (no worker code), as a ratio to 300 ms;
- the serial chain: the round trips a step must make one after another (claim commit,
  a reservation, one chart, its PNG, the manifest, the finalize), made by the benchmark
  itself with no worker code: what no design of the worker goes below on this machine;
- the 8-chart step warm, as a ratio to 300 ms (target <= 1.25) and to the serial chain
  measured in the same run (target <= 1.15), with its Firestore RPCs (warm: the instance,
  and the emulator's JVM after unmeasured steps, whose objects are then deleted from
  fake-gcs-server, which slows as they pile up), and the claim's own: the RPCs sent from
  inside `claim_step`, and its time as the worker logged it; and the bucket check each step
  makes before its claim, measured alone with the worker's adapter;
- the instance's capacity: THREADS (= Cloud Run concurrency, 4) steps of 8 charts posted
  at once, as a ratio to 300 ms (target <= 1.5), and the most calls the stand-in had in
  flight meanwhile (target THREADS x CHART_CONCURRENCY = 32);
- the first step after an instance starts: without the start-up warm-up, with it while it
  is still running (the request that woke the instance), and once it has finished;
- the curve for 1, 2, 4, 8, 16, 32 charts: wall / 300 ms, wall / the 1-chart step (target
  <= 1.3 up to CHART_CONCURRENCY, default 8), and wall / the bound past it
  (ceil(N / concurrency) x 300 ms: the charts go in waves).

    .venv/bin/python benchmarks/bench_served_step.py [--runs 3]

Exits 1 if a target is missed. No timed test: absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from e2e.multi_instance import (  # noqa: E402
    MultiInstanceStack,
    StandInAccount,
    running_instances,
    template_copies,
)
from e2e.stack import Worker, wait_until  # noqa: E402
from harness.builders import chart_step_for, flow_run  # noqa: E402
from harness.chart_img_server import peak_in_flight_of  # noqa: E402
from harness.firestore_emulator import FirestoreEmulator, start_firestore_emulator  # noqa: E402
from harness.gcs_emulator import start_gcs_emulator  # noqa: E402

LATENCY = 0.3
ACCOUNTS = 8
CONCURRENCY = 8
CURVE = (1, 2, 4, 8, 16, 32)
THREADS = 4  # gunicorn threads = Cloud Run concurrency, as deploy.sh sets them
TARGET_WARM = 1.25  # x one chart
TARGET_CHAIN = 1.15  # x the serial chain
TARGET_CROWD = 1.5  # THREADS steps at once, x one chart
TARGET_IN_FLIGHT = THREADS * CONCURRENCY
TARGET_FLAT = 1.3
# The emulator is a JVM: its first few thousand operations run before the JIT has compiled
# them, and a step's RPCs take two to three times as long then (measured: a commit 9 ms,
# later 4 ms; a BatchWrite of 8 reservations 24 ms of the emulator's CPU after 50 steps,
# 7.5 ms after 250). A production Firestore has no such warm-up, so "warm" is measured after
# these steps.
EMULATOR_WARM_UP_STEPS = 200
LAUNCHER = [sys.executable, str(REPO / "benchmarks" / "rpc_counting_serve.py")]


def step_document(run_id: str, template_ids: list[str]) -> dict[str, Any]:
    return flow_run({"charts": chart_step_for(template_ids)}, run_id=run_id)


@dataclass
class StepRun:
    wall: float
    rpcs: Counter[str]
    run_id: str = ""
    worker: Worker | None = None

    def claim_ms(self) -> Any:
        """The claim's time as the worker measured it (its "claim succeeded" line)."""
        lines = self.worker.lines_for(self.run_id, "claim succeeded") if self.worker else []
        return lines[0].get("durationMs") if lines else None

    def claim(self) -> str:
        """The claim's round trips (counted as `claim:<method>`) and time."""
        rpcs = Counter({k.removeprefix("claim:"): v for k, v in self.rpcs.items() if k.startswith("claim:")})
        return f"claim {fmt_rpcs(rpcs)} RPCs, {self.claim_ms()} ms"


class Instance:
    """One served instance, its stack and its RPC count file."""

    def __init__(self, stack: MultiInstanceStack, rpc_file: Path) -> None:
        self.stack = stack
        self.worker: Worker = stack.workers[0]
        self.rpc_file = rpc_file

    def rpcs(self) -> Counter[str]:
        try:
            return Counter(self.rpc_file.read_text().split())
        except FileNotFoundError:
            return Counter()

    def step(self, template_ids: list[str]) -> StepRun:
        run_id = f"bench_{uuid.uuid4().hex[:10]}"
        document = step_document(run_id, template_ids)
        self.stack.create_run(run_id, document)
        before = self.rpcs()
        started = time.monotonic()
        status = self.stack.deliver(self.worker, run_id, document)
        wall = time.monotonic() - started
        rpcs = self.rpcs() - before
        step = (self.stack.flow_run_ref(run_id).get().to_dict() or {})["steps"]["charts"]
        if status != 200 or step.get("status") != "SUCCEEDED":
            raise RuntimeError(f"step {run_id}: HTTP {status}, {step}\n{self.worker.log_tail()}")
        return StepRun(wall, rpcs, run_id, self.worker)

    def crowd(self, template_ids: list[str], steps: int) -> tuple[float, int]:
        """`steps` steps posted at once: (wall until the last is finalized, the most calls
        the stand-in had in flight meanwhile)."""
        deliveries = []
        for _ in range(steps):
            run_id = f"bench_{uuid.uuid4().hex[:10]}"
            document = step_document(run_id, template_ids)
            self.stack.create_run(run_id, document)
            deliveries.append((self.worker, run_id, document, f"evt-{run_id}"))
        started = time.monotonic()  # CLOCK_MONOTONIC: the stand-in's clock too
        statuses = self.stack.deliver_at_once(deliveries)
        wall = time.monotonic() - started
        for _, run_id, _, _ in deliveries:
            step = (self.stack.flow_run_ref(run_id).get().to_dict() or {})["steps"]["charts"]
            if step.get("status") != "SUCCEEDED":
                raise RuntimeError(f"step {run_id}: HTTP {statuses}, {step}\n{self.worker.log_tail()}")
        calls = [r for r in self.stack.stand_in.requests() if r["arrived"] >= started]
        return wall, peak_in_flight_of(calls)

    def warmed_up(self) -> bool:
        return any(line.get("message") == "instance warmed up" for line in self.worker.log_lines())


def empty_bucket(stack: MultiInstanceStack) -> None:
    """fake-gcs-server's in-memory backend slows down as objects pile up (measured: 18 ms of
    its CPU per 8-chart step at first, 60 ms after 1,800 objects); Cloud Storage does not. So
    what the warm-up wrote is deleted before anything is measured."""
    for blob in stack.storage.list_blobs(stack.bucket):
        blob.delete()


def floor(base_url: str, key: str, count: int = CONCURRENCY) -> float:
    """`count` bare concurrent posts to the stand-in: the machine's and the stand-in's own cost."""
    import httpx

    with httpx.Client(limits=httpx.Limits(max_connections=count)) as client:

        def post(i: int) -> int:
            body = {"symbol": "BINANCE:BTCUSDT", "interval": "1h", "width": 800 - i}
            url = f"{base_url}/v2/tradingview/advanced-chart"
            return client.post(url, json=body, headers={"x-api-key": key}).status_code

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=count) as pool:
            list(pool.map(post, range(count)))
        return time.monotonic() - started


def serial_chain(stack: MultiInstanceStack, key: str) -> float:
    """The step's round trips that no design can overlap, made one after another by this
    process with the same client libraries and no worker code: the claim (a compare-and-set
    commit on the version the event carried), one quota reservation (another), one
    chart, its PNG write, the manifest write, the finalize commit. A served 1-chart step
    cannot be faster than this chain; the target is read against it."""
    import httpx

    run = stack.firestore.collection("bench_chain").document(uuid.uuid4().hex[:10])
    usage = stack.firestore.collection("bench_chain").document(f"usage_{uuid.uuid4().hex[:10]}")
    written = usage.set({"usageToday": 0}).update_time
    created = run.set({"steps": {"charts": {"status": "READY"}}}).update_time
    folder = stack.storage.bucket(stack.bucket)
    png, manifest = b"\x89PNG" + os.urandom(40_000), b"{}" * 1_000
    body = {"symbol": "BINANCE:BTCUSDT", "interval": "1h"}
    url = f"{stack.stand_in.base_url}/v2/tradingview/advanced-chart"
    with httpx.Client() as client:
        client.post(url, json=body, headers={"x-api-key": key})  # connected, as a warm instance is
        started = time.monotonic()

        claimed = stack.firestore.write_option(last_update_time=created)
        run.update({"steps.charts.status": "RUNNING"}, option=claimed)
        usage.update({"usageToday": 1}, option=stack.firestore.write_option(last_update_time=written))
        client.post(url, json=body, headers={"x-api-key": key}).raise_for_status()
        folder.blob(f"chain/{run.id}.png").upload_from_string(png, if_generation_match=0)
        folder.blob(f"chain/{run.id}.json").upload_from_string(manifest)
        run.update({"steps.charts.status": "SUCCEEDED"})
        took = time.monotonic() - started
    for leftover in (*folder.list_blobs(prefix=f"chain/{run.id}."), run, usage):
        leftover.delete()
    return took


def bucket_check(stack: MultiInstanceStack, times: int = 21) -> float:
    """What the worker asks of its bucket before each claim (`ArtifactStore.check_bucket`:
    one listing of one name), made here with the same adapter: the median of `times`."""
    from worker_chart_export.adapters.gcs import GcsArtifactStore
    from worker_chart_export.core.clock import SYSTEM_CLOCK

    store = GcsArtifactStore(stack.storage, stack.bucket, clock=SYSTEM_CLOCK)
    store.check_bucket()  # connected, as a warm instance is
    took = []
    for _ in range(times):
        started = time.monotonic()
        store.check_bucket()
        took.append(time.monotonic() - started)
    return statistics.median(took)


def fmt_rpcs(rpcs: Counter[str]) -> str:
    return f"{sum(rpcs.values())} ({', '.join(f'{k} {v}' for k, v in sorted(rpcs.items()))})"


class Bench:
    def __init__(self, stack: ExitStack, emulator: FirestoreEmulator, gcs_url: str, templates: Path) -> None:
        self._stack = stack
        self._emulator = emulator
        self._gcs_url = gcs_url
        self._templates = templates
        self.accounts = [
            StandInAccount(
                f"acc{i}",
                rate=100.0,
                burst=50,
                config={"ratePerSecond": 100, "burst": 50, "dailyLimit": 100000},
            )
            for i in range(1, ACCOUNTS + 1)
        ]

    def instance(self, *, warm_up: bool = True) -> Instance:
        """A fresh instance; returns as soon as it listens (its warm-up, if any, running)."""
        rpc_file = Path(self._stack.enter_context(tempfile.TemporaryDirectory())) / "rpcs.txt"
        command = [*LAUNCHER, *([] if warm_up else ["--no-warm-up"]), "serve"]
        stack = self._stack.enter_context(
            running_instances(
                self._emulator,
                self._gcs_url,
                self.accounts,
                instances=1,
                latency=LATENCY,
                templates_dir=self._templates,
                extra_env={
                    "RPC_COUNT_FILE": str(rpc_file),
                    "CHART_CONCURRENCY": str(CONCURRENCY),
                    "THREADS": str(THREADS),
                },
                command=command,
            )
        )
        return Instance(stack, rpc_file)


def capacity(instance: Instance, template_ids: list[str], runs: int, key: str) -> bool:
    """THREADS steps posted at once to the one instance: what Cloud Run sends it at its
    concurrency. Every chart of every step should be in flight together."""
    floors, crowds = [], []
    for _ in range(runs):
        floors.append(floor(instance.stack.stand_in.base_url, key, TARGET_IN_FLIGHT))
        crowds.append(instance.crowd(template_ids, THREADS))
    floor_wall = statistics.median(floors)
    wall = statistics.median(w for w, _ in crowds)
    peaks = [p for _, p in crowds]
    ok = wall / LATENCY <= TARGET_CROWD and min(peaks) >= TARGET_IN_FLIGHT
    print(
        f"floor: {TARGET_IN_FLIGHT} bare concurrent posts {floor_wall:.3f} s "
        f"= {floor_wall / LATENCY:.2f} x {LATENCY} s"
    )
    print(
        f"{THREADS} steps of {len(template_ids)} charts at once (THREADS {THREADS}): {wall:.3f} s = "
        f"{wall / LATENCY:.2f} x {LATENCY} s (target <= {TARGET_CROWD}); calls in flight at the "
        f"stand-in, per run: {peaks} (target {TARGET_IN_FLIGHT})  {'PASS' if ok else 'FAIL'}"
    )
    return ok


@dataclass
class Emulators:
    firestore: FirestoreEmulator
    gcs_url: str
    templates: Path  # a folder of template copies
    template_ids: list[str]


def start_emulators(resources: ExitStack, templates: int) -> Emulators:
    """The Firestore emulator (the benchmark's own client pointed at it), fake-gcs-server
    and `templates` template copies in a folder, all stopped/removed with `resources`."""
    emulator = resources.enter_context(start_firestore_emulator())
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
    gcs = start_gcs_emulator()
    resources.callback(gcs.stop)
    folder = Path(resources.enter_context(tempfile.TemporaryDirectory()))
    return Emulators(emulator, gcs.url, folder, template_copies(folder, templates))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median reported)")
    args = parser.parse_args()
    failed = False
    with ExitStack() as resources:
        emulators = start_emulators(resources, max(CURVE))
        ids = emulators.template_ids
        bench = Bench(resources, emulators.firestore, emulators.gcs_url, emulators.templates)
        eight = ids[:8]
        print(
            f"served step on the emulators: stand-in {LATENCY * 1000:.0f} ms per chart, "
            f"{ACCOUNTS} accounts, CHART_CONCURRENCY {CONCURRENCY}, median of {args.runs}; "
            f"warm = after {EMULATOR_WARM_UP_STEPS} unmeasured steps (the emulator's JIT)"
        )

        # first steps: each on a fresh instance
        cold = bench.instance(warm_up=False).step(eight)
        racing = bench.instance().step(eight)
        settled = bench.instance()
        wait_until(settled.warmed_up, timeout=60, what="the instance's warm-up")
        warm_up_rpcs = settled.rpcs()
        after_warm_up = settled.step(eight)

        # warm, interleaved with the floor
        instance = settled
        for _ in range(EMULATOR_WARM_UP_STEPS):
            instance.step(eight)
        empty_bucket(instance.stack)
        key = bench.accounts[0].key
        floors, chains, warm = [], [], []
        for _ in range(args.runs):
            floors.append(floor(instance.stack.stand_in.base_url, key))
            chains.append(serial_chain(instance.stack, key))
            warm.append(instance.step(eight))
        floor_wall = statistics.median(floors)
        chain_wall = statistics.median(chains)
        warm_wall = statistics.median(r.wall for r in warm)
        ratio = warm_wall / LATENCY
        chain_ratio = warm_wall / chain_wall
        ok = ratio <= TARGET_WARM
        chain_ok = chain_ratio <= TARGET_CHAIN
        failed |= not (ok and chain_ok)
        print(
            f"floor: {CONCURRENCY} bare concurrent posts {floor_wall:.3f} s "
            f"= {floor_wall / LATENCY:.2f} x {LATENCY} s"
        )
        print(
            f"serial chain (claim, reservation, 1 chart, PNG, manifest, finalize, one after "
            f"another, no worker code): {chain_wall:.3f} s = {chain_wall / LATENCY:.2f} x {LATENCY} s"
        )
        print(
            f"8 charts, warm:                       {warm_wall:.3f} s = {ratio:.2f} x {LATENCY} s "
            f"(target <= {TARGET_WARM}) {'PASS' if ok else 'FAIL'}; "
            f"{chain_ratio:.2f} x the serial chain (target <= {TARGET_CHAIN}) "
            f"{'PASS' if chain_ok else 'FAIL'}"
        )
        check = bucket_check(instance.stack)
        print(
            f"  of which the bucket check before the claim (one listing of one name): "
            f"{check * 1000:.1f} ms = {check / warm_wall:.1%} of the step"
        )
        print(f"  Firestore RPCs per step: {fmt_rpcs(warm[-1].rpcs)}")
        print(f"  of which {warm[-1].claim()} (each run: {', '.join(str(r.claim_ms()) for r in warm)} ms)")
        failed |= not capacity(instance, eight, args.runs, key)
        for label, run in (
            ("first step, no warm-up:             ", cold),
            ("first step, warm-up still running:  ", racing),
            ("first step, after the warm-up:      ", after_warm_up),
        ):
            print(
                f"{label} {run.wall:.3f} s = {run.wall / LATENCY:.2f} x {LATENCY} s; "
                f"RPCs {fmt_rpcs(run.rpcs)}; {run.claim()}"
            )
        print(f"  the warm-up itself (at start, off the request path): RPCs {fmt_rpcs(warm_up_rpcs)}")

        print(
            f"\n{'charts':>6} {'wall s':>8} {'/300ms':>7} {'/1 chart':>9} {'/bound':>7} {'RPCs':>5}  result"
        )
        curve: dict[int, StepRun] = {}
        for n in CURVE:
            runs = [instance.step(ids[:n]) for _ in range(args.runs)]
            curve[n] = StepRun(statistics.median(r.wall for r in runs), runs[-1].rpcs)
        for n, run in curve.items():
            bound = math.ceil(n / CONCURRENCY) * LATENCY
            flat = run.wall / curve[1].wall
            verdict = "-"
            if n <= CONCURRENCY:
                verdict = "PASS" if flat <= TARGET_FLAT else "FAIL"
                failed |= flat > TARGET_FLAT
            rpcs = sum(run.rpcs.values())
            print(
                f"{n:>6} {run.wall:8.3f} {run.wall / LATENCY:7.2f} {flat:9.2f} "
                f"{run.wall / bound:7.2f} {rpcs:>5}  {verdict}"
            )
        print(
            f"past CHART_CONCURRENCY={CONCURRENCY} the charts go in waves: "
            f"bound = ceil(N/{CONCURRENCY}) x {LATENCY} s"
        )
        for worker_stack in (instance.stack,):
            statuses = Counter(r["status"] for r in worker_stack.stand_in.requests())
            print(f"stand-in answers (last instance): {json.dumps(dict(statuses))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
