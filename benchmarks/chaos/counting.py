"""What a user counts at the end of a chaos run, read from where a user would read it: the
usage documents (units), the stand-in's own log and books (calls, units charged, keys used
up), the flow_runs (steps), the manifests and their PNGs in the bucket (charts, and whether
each is the one its step asked for), Eventarc's record (5xx answered, dead letters); and,
while the run lasts, which keys are set aside and how long (`KeyWatch`, sampling the usage
documents).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaos.conductor import Applied
from chaos.fleet import ChaosStack, Incarnation
from chaos.judging import Asked, Judgement, Received, Span, Verdict, Version, chart_img_symbol, judge
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


@dataclass(frozen=True)
class Produced:
    """A run the producer created: what it planned, when it was written, and what its step
    asked beyond the templates (the expectations of the count, never read back)."""

    planned: PlannedRun
    created: datetime
    timeframe: str
    min_images: int


@dataclass
class Step:
    produced: Produced
    run_id: str
    status: str = "MISSING"
    error: dict[str, Any] = field(default_factory=dict)
    claimed: datetime | None = None  # the last claim (startedAt)
    finished: datetime | None = None
    manifest: ReadManifest | None = None
    attempt: int = 0  # its claims (the worker's count: reported, never judged)

    @property
    def run(self) -> PlannedRun:
        return self.produced.planned

    @property
    def created(self) -> datetime:
        return self.produced.created


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


def read_steps(stack: ChaosStack, created: dict[str, Produced]) -> list[Step]:
    steps = []
    references = [stack.flow_run_ref(run_id) for run_id in created]
    for snapshot in stack.db.get_all(references):
        step = Step(created[snapshot.id], snapshot.id)
        fields = ((snapshot.to_dict() or {}).get("steps") or {}).get(STEP) or {}
        step.status = str(fields.get("status", "MISSING"))
        step.error = fields.get("error") or {}
        step.claimed, step.finished = moment_of(fields.get("startedAt")), moment_of(fields.get("finishedAt"))
        step.attempt = int(fields.get("attempt") or 0)
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


def reserving_at_death(lines: list[dict[str, Any]], charts_of: dict[str, int]) -> int:
    """The units an instance's log says it may have been reserving when the log ends (any
    account: which one, only the store knew): a reservation's commit is sent before any line
    can say a unit is taken, and a commit sent by an instance SIGKILLed meanwhile may still
    land (the Firestore emulator, resumed after a pause, applies one in about half of the
    tries), counted for no call. A step claimed and not handled to its end may be reserving
    one unit for each chart of it (`charts_of`: the producer's count, by run id) that is
    neither finished ("chart api call finished", "chart reused") nor holding a unit (an
    attempt open, or one its first wave prepaid): an upper bound, never a guess below it."""
    charts: dict[str, int] = {}  # claimed run -> charts not finished
    holding: Counter[str] = Counter()  # run -> units in hand (attempts open, wave units unused)
    for line in lines:
        run_id, message = str(line.get("runId")), line.get("message")
        if message == "claim succeeded":
            charts[run_id], holding[run_id] = charts_of.get(run_id, 0), 0
        elif run_id not in charts:
            continue
        elif message in ("event handled", "event handling failed"):
            del charts[run_id]
        elif message in ("chart api call finished", "chart reused"):
            charts[run_id] -= 1
        elif message == "chart-img first wave reserved":
            holding[run_id] += sum(int(n) for n in line.get("units", {}).values())
        elif message == "chart api attempt started" and not line.get("prepaid"):
            holding[run_id] += 1  # (a prepaid attempt uses a unit its wave counted)
        elif message in ("chartsApi.request", "chart-img prepaid lease dropped"):
            holding[run_id] -= 1
    return sum(max(0, left - max(0, holding[run_id])) for run_id, left in charts.items())


def held_at_kills(
    incarnations: list[Incarnation], charts_of: dict[str, int]
) -> dict[str, tuple[Counter[str], int]]:
    """Per killed incarnation ("worker-1.2"): the units its log shows in hand as it died, per
    account (`units_in_hand`), and those it may have been reserving (`reserving_at_death`).
    Its log ends at the kill (every line is flushed as written; a restart writes a log of
    its own), so this is the moment of the kill."""
    held = {}
    for incarnation in incarnations:
        if incarnation.killed:
            lines = incarnation.log_lines()
            name = f"{incarnation.name}.{incarnation.generation}"
            held[name] = (units_in_hand(lines), reserving_at_death(lines, charts_of))
    return held


def received_by_digest(calls: list[dict[str, Any]]) -> dict[str, list[Received]]:
    """The requests the stand-in drew a PNG for, by the digest the PNG carries."""
    found: dict[str, list[Received]] = defaultdict(list)
    for call in calls:
        if call.get("status") == 200 and call.get("digest"):
            found[str(call["digest"])].append(
                Received(
                    call.get("template"),
                    call.get("template_version"),
                    call.get("symbol"),
                    call.get("interval"),
                    datetime.fromtimestamp(float(call["wall"]), UTC),
                )
            )
    return found


def judge_manifest(
    stack: ChaosStack,
    step: Step,
    received: dict[str, list[Received]],
    symbol_templates: dict[str, str],
) -> list[tuple[str, Judgement]]:
    """Each item of the step's manifest: (template id, judgement) against what the step asked
    (the producer's symbol through the template's pattern, the step's timeframe, the version
    current at the last claim) and the request the stand-in drew its PNG for."""
    assert step.manifest is not None
    versions: dict[str, list[Version]] = defaultdict(list)
    for version in stack.template_versions:
        versions[version.template_id].append(Version(version.label, version.since))
    claimed = step.claimed or step.created
    asked_templates = set(step.run.templates)
    judged = []
    for item in step.manifest.items:
        template = item.chart_template_id
        if template not in asked_templates or template not in symbol_templates:
            judged.append((template, Judgement(Verdict.WRONG, "a template the step did not ask for")))
            continue
        asked = Asked(
            template,
            chart_img_symbol(symbol_templates[template], step.run.symbol),
            step.produced.timeframe,
            claimed,
        )
        digest = digest_in_png(stack.read_object(item.png_gcs_uri.split("/", 3)[3]))
        judged.append((template, judge(asked, received.get(digest or "", []), versions[template])))
    return judged


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
