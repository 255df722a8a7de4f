"""Quota under chaos (issues 27, 37): a day's bad luck lived in minutes, counted as a user feels it.

Steady traffic: a producer creates runs at a steady pace (each one CHART_EXPORT step of 4
charts, minImages 3, base symbols unique per run), advance_flow starts them, three served
worker instances render them through Eventarc's front end (chaos/eventarc.py: redelivery with
a limit, dead letters), 10 accounts of mixed plans (BASIC, PRO, MEGA) whose pace, quota and
resolution the CHART-IMG stand-in enforces; the reaper on its schedule; a step a window held
back waits and comes back (chaos/fleet.py's patience settings). All of it on the Firestore
emulator (its real triggers) and fake-gcs-server, each part in its own process.

Bad luck, from a schedule seeded by --seed (chaos/schedule.py, replayable): CHART-IMG refusing
connections; every key hearing 429 "Too Many Requests" (a window over a minute in the full
mode); one key spent by another client ("Limit Exceeded"); bursts of 500 and of 504 "External
Request Timeout" (a unit spent); one template drawing 401; templates edited in Firestore;
Firestore paused (SIGSTOP/SIGCONT of the emulator); an instance SIGKILLed and restarted; and
in the full mode one outage of about 5 minutes, longer than a step's budget.

Counted at the end (chaos/counting.py, chaos/judging.py) and held to the targets
(chaos/targets.py): deliverable steps lost = 0 (deliverable by the schedule and the stand-in's
books; lost unless SUCCEEDED with minImages items in its manifest); 0 SUCCEEDED steps without
their manifest or minImages items; units (usage documents) == the units the stand-in charged,
on every key, but for units a killed instance held as it died; 0 wrong charts (each PNG traced
by its digest to the request the stand-in received, judged against the step's symbol,
timeframe, template and the version current at its claim); 0 steps unfinished after the
settling; calls / charts delivered <= 1.05 outside the stand-in's own failures; no key set
aside at the end but a really exhausted one; in the full mode, every deliverable step the
outage met SUCCEEDED after it.

    .venv/bin/python benchmarks/bench_chaos.py --seed 1 [--short] [--print-schedule]

Exits 1 if a target is missed. The short mode (--short, about 1 to 2 minutes) is the
end-to-end test's (tests/e2e/test_chaos_short.py).
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
    Produced,
    Step,
    held_at_kills,
    judge_manifest,
    read_steps,
    received_by_digest,
    spans_of,
    units_by_key,
)
from chaos.fleet import ChaosStack, FleetConfig  # noqa: E402
from chaos.judging import Received, Span, StepAsked, Verdict, outcome, undeliverable  # noqa: E402
from chaos.schedule import FULL, SHORT, Kind, Profile, Schedule, build_schedule  # noqa: E402
from chaos.targets import Figures, checks, report  # noqa: E402

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


def templates_folder(folder: Path) -> dict[str, str]:
    """The bundled templates and the refused one (another width, so CHART-IMG tells it apart),
    written to `folder`; each one's chartImgSymbolTemplate by its id (what a step's symbol
    becomes for CHART-IMG, which the count expects of every chart)."""
    for path in sorted(TEMPLATES_DIR.glob("*.json")):
        shutil.copy(path, folder / path.name)
    refused = json.loads((TEMPLATES_DIR / "momentum_rsi_macd_v1.json").read_text(encoding="utf-8"))
    refused.update(id=REFUSED_TEMPLATE, description="Refused by CHART-IMG with 401 (issue 27)")
    refused["request"] = {**refused["request"], "width": 720}
    (folder / f"{REFUSED_TEMPLATE}.json").write_text(json.dumps(refused, indent=2), encoding="utf-8")
    written = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]
    return {str(t["id"]): str(t["chartImgSymbolTemplate"]) for t in written}


@dataclass
class Traffic:
    """The producer: each planned run created at its moment (late ones at once), as PENDING."""

    stack: ChaosStack
    schedule: Schedule
    prefix: str
    created: dict[str, Produced] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def run(self, origin: float) -> None:
        for planned in self.schedule.runs:
            time.sleep(max(0.0, origin + planned.at - time.monotonic()))
            run_id = f"{self.prefix}_{planned.index:04d}"
            min_images = self.schedule.profile.min_images
            step = chart_step_for(list(planned.templates), min_images=min_images)
            step["status"] = "PENDING"
            document = flow_run({"charts": step}, run_id=run_id, symbol=planned.symbol)
            try:
                self.stack.write_flow_run(document)
            except Exception as exc:  # the producer's own bad luck, counted
                self.errors.append(f"{run_id}: {type(exc).__name__}: {exc}")
                continue
            self.created[run_id] = Produced(planned, datetime.now(UTC), str(step["timeframe"]), min_images)


def unfinished(stack: ChaosStack, created: dict[str, Produced]) -> list[str]:
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
    stack: ChaosStack,
    schedule: Schedule,
    traffic: Traffic,
    conductor: Conductor,
    watch: KeyWatch,
    config: FleetConfig,
    symbol_templates: dict[str, str],
) -> Figures:
    assert stack.stand_in is not None and stack.eventarc is not None
    figures = Figures(schedule.seed, schedule.profile.name, len(schedule.runs), len(traffic.created))
    steps = read_steps(stack, traffic.created)
    figures.statuses = Counter(step.status for step in steps)
    figures.stuck = [f"{s.run_id} {s.status}" for s in steps if s.status in (*UNFINISHED, "MISSING")]
    figures.producer_errors = traffic.errors
    figures.units = units_by_key(stack)
    calls = stack.stand_in.requests()
    books = stack.stand_in.accounts()
    figures.charged = {str(a["account_id"]): int(a["charged"]) for a in books}
    figures.calls = dict(Counter(str(c["account_id"]) for c in calls))
    charts_of = {run_id: len(produced.planned.templates) for run_id, produced in traffic.created.items()}
    for name, (units, reserving) in held_at_kills(stack.incarnations, charts_of).items():
        figures.held_at_kills[name], figures.reserving_at_kills[name] = dict(units), reserving
    figures.answers = Counter(f"{c['status']} {c.get('message') or ''}".strip() for c in calls)
    figures.calls_by_window = Counter(str(c["chaos"]).split("#")[0] for c in calls if c.get("chaos"))
    exhausted_at = {str(a["account_id"]): _moment(a["exhausted_at"]) for a in books}
    figures.really_exhausted = sorted(key for key, moment in exhausted_at.items() if moment is not None)
    judge_charts(stack, steps, figures, received_by_digest(calls), symbol_templates)
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
    judge_steps(steps, figures, spans_of(conductor.applied), exhausted_at, config.step_span())
    figures.conductor_errors = [f"{n}: {e}" for n, a in conductor.applied.items() for e in a.errors]
    return figures


def _moment(wall: float | None) -> datetime | None:
    return None if wall is None else datetime.fromtimestamp(wall, UTC)


def judge_steps(
    steps: list[Step],
    figures: Figures,
    spans: list[Span],
    exhausted_at: dict[str, datetime | None],
    patience_seconds: float,
) -> None:
    """Each step: deliverable or not (the schedule and the stand-in's books), and what the user
    got of it (its status and manifest)."""
    refused = {s.target for s in spans if s.kind == Kind.TEMPLATE_401.value}
    outage = next((s for s in spans if s.kind == Kind.OUTAGE.value), None)
    now = datetime.now(UTC)
    if outage is not None:
        figures.outage = f"{outage.name} {outage.seconds(now):.0f} s"
    for step in steps:
        ended = step.finished or now
        asked = StepAsked(step.run.templates, step.produced.min_images, step.created, ended)
        why = undeliverable(
            asked,
            refused_templates=refused,
            exhausted_at=exhausted_at,
            spans=spans,
            patience_seconds=patience_seconds,
        )
        items = len(step.manifest.items) if step.manifest is not None else None
        got = outcome(step.status, items, step.produced.min_images, step.error)
        if step.status == "SUCCEEDED":
            if got is not None:
                figures.misses.append(f"{step.run_id}: {got}")
            figures.waited[step.attempt] += 1
        if why is not None:
            figures.undeliverable[step.run_id] = (why, got or "")
            continue
        figures.deliverable += 1
        if got is not None:
            figures.lost.append(f"{step.run_id}: {got}")
        if outage is not None and outage.meets(step.created, ended):
            figures.outage_met += 1
            if got is not None:
                figures.outage_lost.append(f"{step.run_id}: {got}")


def judge_charts(
    stack: ChaosStack,
    steps: list[Step],
    figures: Figures,
    received: dict[str, list[Received]],
    symbol_templates: dict[str, str],
) -> None:
    for step in steps:
        if step.manifest is None:
            continue
        judged = judge_manifest(stack, step, received, symbol_templates)
        if step.status == "SUCCEEDED":
            figures.delivered += len(judged)
        else:
            figures.in_failed_manifests += len(judged)
        for template, judgement in judged:
            figures.verdicts[judgement.verdict.value] += 1
            if judgement.verdict is Verdict.WRONG:
                figures.wrong.append(f"{step.run_id}/{template}: {judgement.why}")


def keep_for_replay(stack: ChaosStack, conductor: Conductor, log_dir: Path) -> None:
    """The stand-in's request log (times: the system's monotonic clock) and books, the windows
    as applied and the usage documents, beside the processes' logs: a missed target can be
    read call by call."""
    assert stack.stand_in is not None
    (log_dir / "stand_in_requests.json").write_text(json.dumps(stack.stand_in.requests(), indent=1))
    (log_dir / "stand_in_books.json").write_text(json.dumps(stack.stand_in.accounts(), indent=1))
    usage = {s.id: s.to_dict() for s in stack.db.collection("chart_img_accounts_usage").stream(timeout=30)}
    (log_dir / "usage_documents.json").write_text(json.dumps(usage, indent=1, default=str))
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
    symbol_templates = templates_folder(folder)
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
        figures = count(stack, schedule, traffic, conductor, watch, config, symbol_templates)
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
    parser.add_argument("--short", action="store_true", help="the short mode (1 to 2 minutes)")
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
