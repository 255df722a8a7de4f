"""Quota under chaos (issue 27): a day's bad luck lived in minutes, counted as a user counts it.

Steady traffic: a producer creates runs at a steady pace (each one CHART_EXPORT step of 4
charts, base symbols unique per run), advance_flow starts them, three served worker instances
render them through Eventarc's front end (chaos/eventarc.py: redelivery with a limit, dead
letters), 10 accounts of mixed plans (BASIC, PRO, MEGA) whose pace, quota and resolution the
CHART-IMG stand-in enforces; the reaper on its schedule. All of it on the Firestore emulator
(its real triggers) and fake-gcs-server, each part in its own process.

Bad luck, from a schedule seeded by --seed (chaos/schedule.py, replayable): CHART-IMG refusing
connections; every key hearing 429 "Too Many Requests" (a window over a minute in the full
mode); one key spent by another client ("Limit Exceeded"); bursts of 500 and of 504 "External
Request Timeout" (a unit spent); one template drawing 401; templates edited in Firestore;
Firestore paused (SIGSTOP/SIGCONT of the emulator); an instance SIGKILLed and restarted.

Counted at the end (chaos/counting.py) and held to the targets (chaos/targets.py): units
(usage documents) == calls (the stand-in's log) exactly; calls / charts delivered <= 1.05
outside the stand-in's own failures; 0 wrong charts (each PNG carries the digest of the body
it was drawn from, judged against the template's versions: chaos/judging.py); 0 steps left
unfinished after the settling (2 minutes in the full mode); no key set aside at the end but a
really exhausted one; every FAILED step explained by a window of the schedule.

    .venv/bin/python benchmarks/bench_chaos.py --seed 1 [--short] [--print-schedule]

Exits 1 if a target is missed. The short mode (--short, under 2 minutes) is the end-to-end
test's (tests/e2e/test_chaos_short.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

from chaos.conductor import Conductor  # noqa: E402
from chaos.counting import (  # noqa: E402
    UNFINISHED,
    KeyWatch,
    Step,
    explanations,
    held_at_kills,
    judge_manifest,
    killed_holding,
    manifest_writers,
    read_steps,
    spans_of,
    units_by_key,
)
from chaos.fleet import ChaosStack, FleetConfig  # noqa: E402
from chaos.schedule import FULL, SHORT, Kind, PlannedRun, Profile, Schedule, build_schedule  # noqa: E402
from chaos.targets import Figures, checks, really_exhausted, report  # noqa: E402

from e2e.multi_instance import StandInAccount  # noqa: E402
from harness.builders import TEMPLATES_DIR, chart_step_for, flow_run  # noqa: E402
from worker_chart_export.core.chart_img.plans import plan_named  # noqa: E402

PLANS = ("BASIC",) * 5 + ("PRO",) * 3 + ("MEGA",) * 2  # 10 accounts of mixed plans
REFUSED_TEMPLATE = "chaos_refused_v1"  # a copy of a bundled template that CHART-IMG answers 401
SETTLE_POLL_SECONDS = 2.0
SETTLE_GIVE_UP = 10  # x the settling's nominal time: only a reaper that stopped answering gets here


def accounts() -> list[StandInAccount]:
    made = []
    for number, name in enumerate(PLANS, start=1):
        plan = plan_named(name)
        made.append(
            StandInAccount(
                f"{name.lower()}_{number:02d}",
                rate=plan.rate_per_second,
                burst=plan.burst,
                quota=plan.daily_limit,
                config={"plan": name},
            )
        )
    return made


def templates_folder(folder: Path) -> None:
    """The bundled templates and the refused one (another width, so CHART-IMG tells it apart)."""
    for path in sorted(TEMPLATES_DIR.glob("*.json")):
        shutil.copy(path, folder / path.name)
    refused = json.loads((TEMPLATES_DIR / "momentum_rsi_macd_v1.json").read_text(encoding="utf-8"))
    refused.update(id=REFUSED_TEMPLATE, description="Refused by CHART-IMG with 401 (issue 27)")
    refused["request"] = {**refused["request"], "width": 720}
    (folder / f"{REFUSED_TEMPLATE}.json").write_text(json.dumps(refused, indent=2), encoding="utf-8")


@dataclass
class Traffic:
    """The producer: each planned run created at its moment (late ones at once), as PENDING."""

    stack: ChaosStack
    schedule: Schedule
    prefix: str
    created: dict[str, tuple[PlannedRun, datetime]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def run(self, origin: float) -> None:
        for planned in self.schedule.runs:
            time.sleep(max(0.0, origin + planned.at - time.monotonic()))
            run_id = f"{self.prefix}_{planned.index:04d}"
            step = chart_step_for(list(planned.templates), min_images=self.schedule.profile.min_images)
            step["status"] = "PENDING"
            document = flow_run({"charts": step}, run_id=run_id, symbol=planned.symbol)
            try:
                self.stack.write_flow_run(document)
            except Exception as exc:  # the producer's own bad luck, counted
                self.errors.append(f"{run_id}: {type(exc).__name__}: {exc}")
                continue
            self.created[run_id] = (planned, datetime.now(UTC))


def unfinished(stack: ChaosStack, created: dict[str, tuple[PlannedRun, datetime]]) -> list[str]:
    references = [stack.flow_run_ref(run_id) for run_id in created]
    left = []
    for snapshot in stack.db.get_all(references):
        status = (((snapshot.to_dict() or {}).get("steps") or {}).get("charts") or {}).get("status")
        if status in UNFINISHED:
            left.append(f"{snapshot.id} {status}")
    return left


def settle(stack: ChaosStack, traffic: Traffic, passes: int, seconds: float) -> None:
    """Until no step is unfinished, or until the reaper has answered `passes` passes since the
    schedule's end: a count of events, not a clock, so a busy machine, whose passes come later
    (as do the leases' ends and the redeliveries they wait on), gets its steps the same chances.
    Only a reaper that stopped answering meets the give-up bound (`seconds` x SETTLE_GIVE_UP)."""
    first, give_up = len(stack.reaper_reports), time.monotonic() + seconds * SETTLE_GIVE_UP
    while len(stack.reaper_reports) - first < passes and time.monotonic() < give_up:
        try:
            if not unfinished(stack, traffic.created):
                return
        except Exception:  # a store blip while settling: ask again
            pass
        time.sleep(SETTLE_POLL_SECONDS)


def count(
    stack: ChaosStack, schedule: Schedule, traffic: Traffic, conductor: Conductor, watch: KeyWatch
) -> Figures:
    assert stack.stand_in is not None and stack.eventarc is not None
    figures = Figures(schedule.seed, schedule.profile.name, len(schedule.runs), len(traffic.created))
    steps = read_steps(stack, traffic.created)
    figures.statuses = Counter(step.status for step in steps)
    figures.stuck = [f"{s.run_id} {s.status}" for s in steps if s.status in (*UNFINISHED, "MISSING")]
    figures.producer_errors = traffic.errors
    figures.units = units_by_key(stack)
    calls = stack.stand_in.requests()
    figures.calls = dict(Counter(str(c["account_id"]) for c in calls))
    figures.held_at_kills = dict(held_at_kills(stack.incarnations))
    figures.answers = Counter(f"{c['status']} {c.get('message') or ''}".strip() for c in calls)
    figures.calls_by_window = Counter(str(c["chaos"]).split("#")[0] for c in calls if c.get("chaos"))
    figures.really_exhausted = really_exhausted(stack.stand_in.accounts(), figures.calls)
    judge_charts(stack, steps, figures)
    figures.eventarc = stack.eventarc.summary()
    figures.reaper["passes"] = len(stack.reaper_reports)
    for reaped in stack.reaper_reports:
        figures.reaper.update(reaped.get("counts", {}))
    now = datetime.now(UTC)
    figures.set_aside_end = {
        key: f"{reason} until {until:%H:%M:%S}" if until else reason
        for key, (reason, until) in watch.states(now).items()
    }
    figures.set_aside_seconds = {key: dict(seconds) for key, seconds in watch.seconds.items()}
    spans = spans_of(conductor.applied)
    explained = explanations(steps, calls, spans, killed_holding(stack, spans))
    figures.failed = {
        s.run_id: (str(s.error.get("code", "?")), explained[s.run_id]) for s in steps if s.status == "FAILED"
    }
    figures.conductor_errors = [f"{n}: {e}" for n, a in conductor.applied.items() for e in a.errors]
    return figures


def judge_charts(stack: ChaosStack, steps: list[Step], figures: Figures) -> None:
    writers = manifest_writers(stack.incarnations)
    for step in steps:
        if step.manifest is None:
            continue
        verdicts = judge_manifest(stack, step, writers.get(step.run_id))
        if step.status == "SUCCEEDED":
            figures.delivered += len(verdicts)
        else:
            figures.in_failed_manifests += len(verdicts)
        for template, verdict in verdicts:
            figures.verdicts[verdict.value] += 1
            if verdict.value == "wrong":
                figures.wrong.append(f"{step.run_id}/{template}")


def keep_for_replay(stack: ChaosStack, conductor: Conductor, log_dir: Path) -> None:
    """The stand-in's request log (times: the system's monotonic clock) and the windows as
    applied, beside the processes' logs: a missed target can be read call by call."""
    assert stack.stand_in is not None
    (log_dir / "stand_in_requests.json").write_text(json.dumps(stack.stand_in.requests(), indent=1))
    spans = [dataclasses.asdict(span) for span in spans_of(conductor.applied)]
    (log_dir / "windows_applied.json").write_text(json.dumps(spans, indent=1, default=str))


def schedule_for(seed: int, profile: Profile, instances: int = FleetConfig.instances) -> Schedule:
    """The schedule of `seed` for this benchmark's accounts and templates."""
    template_ids = [path.stem for path in sorted(TEMPLATES_DIR.glob("*.json"))]
    return build_schedule(
        seed,
        profile,
        accounts=[a.account_id for a in accounts()],
        templates=template_ids,
        refused_template=REFUSED_TEMPLATE,
        instances=instances,
    )


def run_chaos(seed: int, profile: Profile, log_dir: Path, config: FleetConfig | None = None) -> Figures:
    """One chaos run on a fresh fleet: the schedule of `seed`, the traffic, the settling, the count."""
    config = config or FleetConfig()
    folder = log_dir / "templates"
    folder.mkdir(parents=True, exist_ok=True)
    templates_folder(folder)
    made = accounts()
    schedule = schedule_for(seed, profile, config.instances)
    load_before = load_average()
    stack = ChaosStack(config, made, folder, log_dir)
    with stack:
        conductor = Conductor(stack, schedule)
        conductor.apply_now((Kind.TEMPLATE_401,))
        traffic = Traffic(stack, schedule, f"chaos{seed}_{uuid.uuid4().hex[:6]}")
        watch = KeyWatch(stack).start()
        origin = time.monotonic()
        try:
            conductor.start(origin)
            traffic.run(origin)
            conductor.finish()
            passes = round(profile.settle_seconds / config.reaper_interval)
            settle(stack, traffic, passes, profile.settle_seconds)
        finally:
            conductor.stop()
            watch.stop()
        figures = count(stack, schedule, traffic, conductor, watch)
        figures.wall = time.monotonic() - origin
        keep_for_replay(stack, conductor, log_dir)
    figures.load = f"{load_before} -> {load_average()}"
    return figures


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seed", type=int, action="append", help="a schedule's seed (repeat for several runs)"
    )
    parser.add_argument("--short", action="store_true", help="the short mode (under 2 minutes)")
    parser.add_argument("--print-schedule", action="store_true", help="print the schedule and exit")
    parser.add_argument("--log-dir", type=Path, help="keep the processes' logs there")
    args = parser.parse_args(argv)
    profile = SHORT if args.short else FULL
    passed = True
    for seed in args.seed or [1]:
        print(f"schedule of seed {seed} ({profile.name}, {profile.duration:.0f} s, {profile.runs} runs):")
        print("\n".join(f"  {line}" for line in schedule_for(seed, profile).describe()))
        if args.print_schedule:
            continue
        log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix=f"bench-chaos-{seed}-"))
        figures = run_chaos(seed, profile, log_dir / f"seed{seed}")
        print("\n".join(report(figures)))
        for check in checks(figures):
            print(f"  {'PASS' if check.ok else 'MISS'}  {check.target}: {check.figure}")
            passed &= check.ok
        print(f"logs: {log_dir}")
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
