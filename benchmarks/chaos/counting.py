"""What a user counts at the end of a chaos run, read from where a user would read it: the
usage documents (units), the stand-in's own log (calls), the flow_runs (steps), the manifests
and their PNGs in the bucket (charts, and whether each is the right one), Eventarc's record
(5xx answered, dead letters); and, while the run lasts, which keys are set aside and how long
(`KeyWatch`, sampling the usage documents).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaos.conductor import Applied
from chaos.eventarc import RESET
from chaos.fleet import ChaosStack, Incarnation
from chaos.judging import Rendered, Span, Verdict, Version, explain, judge, read_from
from chaos.schedule import Kind, PlannedRun
from harness.png_digest import digest_in_png
from worker_chart_export.core.chart_img.plans import plan_named
from worker_chart_export.core.chart_img.set_aside import COOL_UNTIL
from worker_chart_export.core.chart_img.usage import EXHAUSTED_UNTIL, disabled_now, window_start
from worker_chart_export.core.naming import moment_of
from worker_chart_export.core.step.manifest_reader import ReadManifest, read_manifest
from worker_chart_export.tools.devstack.processes import StackError

USAGE = "chart_img_accounts_usage"
STEP = "charts"
UNFINISHED = ("PENDING", "READY", "RUNNING")
KILL_SLACK_SECONDS = 3.0  # a kill is recorded once its process group is gone


@dataclass
class Step:
    run: PlannedRun
    run_id: str
    created: datetime
    status: str = "MISSING"
    error: dict[str, Any] = field(default_factory=dict)
    started: datetime | None = None  # the last claim
    finished: datetime | None = None
    manifest: ReadManifest | None = None


def key_state(doc: dict[str, Any], limit: int, now: datetime) -> tuple[str, datetime | None] | None:
    """Why the worker would not use the key now, and until when (None: it would)."""
    today = doc.get("windowStart") == window_start(now)
    if disabled_now(doc, now):  # until its disabledUntil (then a probe), or the day
        return "disabled", None
    exhausted = moment_of(doc.get(EXHAUSTED_UNTIL))
    if exhausted is not None and exhausted > now:
        return "exhausted", exhausted
    if today and int(doc.get("usageToday", 0)) >= int(doc.get("dailyLimit") or limit):
        return "full", None
    cooling = moment_of(doc.get(COOL_UNTIL))
    if cooling is not None and cooling > now:
        return "cooling", cooling
    return None


class KeyWatch:
    """Samples every usage document each `interval` seconds: seconds spent set aside, per key
    and reason (disabled, exhausted, full, cooling)."""

    def __init__(self, stack: ChaosStack, interval: float = 2.0) -> None:
        self.stack = stack
        self.interval = interval
        self.limits = {a.account_id: plan_named(a.config["plan"]).daily_limit for a in stack.accounts}
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="key-watch", daemon=True)

    def start(self) -> KeyWatch:
        self._thread.start()
        return self

    def states(self, now: datetime) -> dict[str, tuple[str, datetime | None]]:
        docs = {s.id: s.to_dict() or {} for s in self.stack.db.collection(USAGE).stream(timeout=5)}
        states = {}
        for account_id, limit in self.limits.items():
            state = key_state(docs.get(account_id, {}), limit, now)
            if state is not None:
                states[account_id] = state
        return states

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            with contextlib.suppress(Exception):  # a paused emulator: this sample is skipped
                for account_id, (reason, _) in self.states(datetime.now(UTC)).items():
                    self.seconds[account_id][reason] += self.interval

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)


def read_steps(stack: ChaosStack, created: dict[str, tuple[PlannedRun, datetime]]) -> list[Step]:
    steps = []
    references = [stack.flow_run_ref(run_id) for run_id in created]
    for snapshot in stack.db.get_all(references):
        run, at = created[snapshot.id]
        step = Step(run, snapshot.id, at)
        fields = ((snapshot.to_dict() or {}).get("steps") or {}).get(STEP) or {}
        step.status = str(fields.get("status", "MISSING"))
        step.error = fields.get("error") or {}
        step.started, step.finished = moment_of(fields.get("startedAt")), moment_of(fields.get("finishedAt"))
        step.manifest = read_step_manifest(stack, snapshot.id)
        steps.append(step)
    return steps


def read_step_manifest(stack: ChaosStack, run_id: str) -> ReadManifest | None:
    """The step's manifest, through the worker's one manifest reader; None when the bucket has
    none (the step failed validation, or never finished). A manifest that breaks the contract
    is a finding, not a missing one: its ManifestUnreadable ends the count, naming the object
    and the JSON path where it breaks."""
    name = f"charts/{run_id}/{STEP}/manifest.json"
    try:
        raw = stack.read_object(name)
    except StackError:
        return None
    return read_manifest(raw, f"gs://{stack.bucket}/{name}")


def units_by_key(stack: ChaosStack) -> dict[str, int]:
    today = window_start(datetime.now(UTC))
    units = {a.account_id: 0 for a in stack.accounts}
    for snapshot in stack.db.collection(USAGE).stream(timeout=30):
        doc = snapshot.to_dict() or {}
        if doc.get("windowStart") == today:
            units[snapshot.id] = int(doc.get("usageToday", 0))
    return units


def units_in_hand(lines: list[dict[str, Any]]) -> Counter[str]:
    """Per account, the units an instance's log says it held and had not yet accounted for
    when its log ends: taken with a step's first wave ("chart-img first wave reserved") or by
    an attempt of its own ("chart api attempt started" without `prepaid`), less those whose
    attempt ended ("chartsApi.request": the call answered, or never left and its unit given
    back) and the prepaid leases dropped (a drop whose unit could not be given back is a unit
    counted for no call, but not one a kill took: not in hand). For an instance killed
    mid-step, the units that died with it: each one counted by the usage documents, and a
    call the stand-in counted only if it had left (the worker's log says when a unit is
    taken, docs/design.md, "A unit pays for a call that left")."""
    held: Counter[str] = Counter()
    for line in lines:
        message = line.get("message")
        if message == "chart-img first wave reserved":
            held.update({str(k): int(n) for k, n in line.get("units", {}).items()})
        elif message == "chart api attempt started" and not line.get("prepaid"):
            held[str(line.get("accountId"))] += 1
        elif message in ("chartsApi.request", "chart-img prepaid lease dropped"):
            held[str(line.get("accountId"))] -= 1
    return +held  # only what is positive


def held_at_kills(incarnations: list[Incarnation]) -> Counter[str]:
    """Per account, the units the killed instances held when they died (`units_in_hand`)."""
    held: Counter[str] = Counter()
    for incarnation in incarnations:
        if incarnation.killed:
            held += units_in_hand(incarnation.log_lines())
    return held


def manifest_writers(incarnations: list[Incarnation]) -> dict[str, Incarnation]:
    """run id -> the incarnation whose "manifest written" line for it is the latest."""
    latest: dict[str, tuple[str, Incarnation]] = {}
    for incarnation in incarnations:
        for line in incarnation.log_lines():
            run_id, moment = line.get("runId"), str(line.get("time"))
            written = line.get("message") == "manifest written"
            if written and isinstance(run_id, str) and (run_id not in latest or moment > latest[run_id][0]):
                latest[run_id] = (moment, incarnation)
    return {run_id: incarnation for run_id, (_, incarnation) in latest.items()}


def judge_manifest(stack: ChaosStack, step: Step, writer: Incarnation | None) -> list[tuple[str, Verdict]]:
    """Each item of the step's manifest: (template id, verdict)."""
    assert step.manifest is not None
    versions: dict[str, list[Version]] = defaultdict(list)
    for version in stack.template_versions:
        versions[version.template_id].append(Version(version.since, version.request))
    written = step.manifest.created_at
    earliest = read_from(step.started or step.created, writer.started if writer else None)
    verdicts = []
    for item in step.manifest.items:
        template = item.chart_template_id
        if item.chart_img_symbol is None:  # the worker always says it: without it, no body to match
            verdicts.append((template, Verdict.WRONG))
            continue
        digest = digest_in_png(stack.read_object(item.png_gcs_uri.split("/", 3)[3]))
        chart = Rendered(
            digest, versions[template], item.chart_img_symbol, step.manifest.timeframe, earliest, written
        )
        verdicts.append((template, judge(chart)))
    return verdicts


def spans_of(applied: dict[str, Applied]) -> list[Span]:
    lasting = (Kind.KEY_EXHAUSTED, Kind.TEMPLATE_401)
    spans = []
    for record in applied.values():
        when = record.span()
        if when is not None:
            end = None if record.window.kind in lasting else when[1]
            window = record.window
            spans.append(Span(window.name, window.kind.value, when[0], end, window.target))
    return spans


def killed_holding(stack: ChaosStack, spans: list[Span]) -> dict[str, set[str]]:
    """run id -> the kills whose instance was handling one of its events when it died (the
    delivery's attempt on that instance got no answer, within KILL_SLACK of the kill)."""
    assert stack.eventarc is not None
    kills = [s for s in spans if s.kind == Kind.INSTANCE_KILL.value]
    found: dict[str, set[str]] = defaultdict(set)
    for delivery in stack.eventarc.deliveries:
        for attempt in delivery.attempts:
            ended = datetime.fromtimestamp(attempt.ended, UTC)
            for kill in kills:
                near = abs((ended - kill.start).total_seconds()) <= KILL_SLACK_SECONDS
                if attempt.failure == RESET and attempt.instance == kill.target and near:
                    found[delivery.run_id].add(kill.name)
    return found


def explanations(
    steps: list[Step], calls: list[dict[str, Any]], spans: list[Span], killed: dict[str, set[str]]
) -> dict[str, list[str]]:
    """run id -> the windows that explain its FAILED step (empty: unexplained)."""
    tagged: dict[str, set[str]] = defaultdict(set)
    called: dict[str, set[str]] = defaultdict(set)  # base symbol -> templates CHART-IMG was asked for
    for call in calls:
        if call.get("symbol"):
            base = str(call["symbol"]).split(":", 1)[-1].removesuffix(".P")
            called[base].add(str(call.get("template")))
            if call.get("chaos"):
                tagged[base].add(str(call["chaos"]))
    found = {}
    for step in steps:
        if step.status == "FAILED":
            life = (step.created, step.finished or datetime.now(UTC))
            killed_it = killed.get(step.run_id, ())
            uncalled = uncalled_failure(step.manifest, called[step.run.symbol])
            found[step.run_id] = explain(life, tagged[step.run.symbol], killed_it, spans, uncalled=uncalled)
    return found


def uncalled_failure(manifest: ReadManifest | None, called: set[str]) -> bool:
    """A chart of the manifest failed without CHART-IMG ever being asked for it (no call of
    its template for the run's symbol in the stand-in's log): it waited for keys that were
    all cooling, or its step's budget ran out first (abandoned)."""
    failures = manifest.failures if manifest is not None else ()
    return any(f.request["chartTemplateId"] not in called for f in failures)
