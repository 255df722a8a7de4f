"""A chaos run's figures, held to issue 37's targets (what a user feels), and printed as a user
reads them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

CALLS_PER_CHART = 1.05


@dataclass
class Figures:
    seed: int
    profile: str
    runs_planned: int = 0
    runs_created: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    stuck: list[str] = field(default_factory=list)  # "runId STATUS" of steps not finished
    deliverable: int = 0  # steps CHART-IMG could have given their charts (judging.undeliverable)
    lost: list[str] = field(default_factory=list)  # "runId: what the user got" of deliverable steps
    misses: list[str] = field(default_factory=list)  # SUCCEEDED without manifest or minImages items
    undeliverable: dict[str, tuple[str, str]] = field(default_factory=dict)  # run -> (why, outcome)
    outage_met: int = 0  # deliverable steps whose life met the outage (full mode)
    outage_lost: list[str] = field(default_factory=list)  # of them, those not SUCCEEDED after it
    outage: str = ""  # the outage as applied, "outage#1 300 s", or "" without one
    units: dict[str, int] = field(default_factory=dict)  # usage documents, per key
    charged: dict[str, int] = field(default_factory=dict)  # the stand-in's books, per key
    calls: dict[str, int] = field(default_factory=dict)  # the stand-in's log, per key
    # per killed incarnation ("worker-1.2"), the units it held as it died, per key (its log),
    # and how many it may have been reserving then, any key (its log: an upper bound)
    held_at_kills: dict[str, dict[str, int]] = field(default_factory=dict)
    reserving_at_kills: dict[str, int] = field(default_factory=dict)
    really_exhausted: list[str] = field(default_factory=list)  # by the stand-in's own books
    answers: Counter[str] = field(default_factory=Counter)  # "200", "429 Too Many Requests"...
    calls_by_window: Counter[str] = field(default_factory=Counter)  # the stand-in's own failures
    delivered: int = 0  # charts in the manifests of SUCCEEDED steps
    in_failed_manifests: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)  # "runId/template: why"
    eventarc: dict[str, Counter[str]] = field(default_factory=dict)
    set_aside_end: dict[str, str] = field(default_factory=dict)  # key -> "reason until"
    set_aside_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    waited: Counter[int] = field(default_factory=Counter)  # SUCCEEDED steps by their claims
    conductor_errors: list[str] = field(default_factory=list)
    producer_errors: list[str] = field(default_factory=list)  # runs the producer could not create
    reaper: Counter[str] = field(default_factory=Counter)  # passes answered 200, outcomes over them
    load: str = ""
    wall: float = 0.0

    @property
    def chaos_calls(self) -> int:
        return sum(self.calls_by_window.values())

    @property
    def calls_total(self) -> int:
        return sum(self.calls.values())

    def held(self, key: str) -> int:
        """The units of `key` the killed instances held as they died, all of them together."""
        return sum(units.get(key, 0) for units in self.held_at_kills.values())


@dataclass(frozen=True)
class Check:
    target: str
    ok: bool
    figure: str


def checks(f: Figures) -> list[Check]:
    units, charged = sum(f.units.values()), sum(f.charged.get(k, 0) for k in f.units)
    off = {k: n - f.charged.get(k, 0) for k, n in sorted(f.units.items()) if n != f.charged.get(k, 0)}
    # A unit taken, then its instance SIGKILLed before the call left, is counted for no call:
    # no worker can avoid that instant between two systems (it errs high, never low). A key
    # is within the target by the units its killed instances' logs show in hand at their
    # deaths; past those, all keys together by the units those instances may have been
    # reserving then (a commit sent, no line yet: the account unknown), no more.
    below = [f"{k} {f.units[k]} vs {f.charged.get(k, 0)}" for k, n in off.items() if n < 0]
    past_held = {k: n - f.held(k) for k, n in off.items() if n > f.held(k)}
    reserving = sum(f.reserving_at_kills.values())
    beyond_kills = below + (
        [f"{k} {f.units[k]} vs {f.charged.get(k, 0)}" for k in past_held]
        if sum(past_held.values()) > reserving
        else []
    )
    paid = f.calls_total - f.chaos_calls
    ratio = paid / f.delivered if f.delivered else float("inf")
    # "cooling" is the usage document's coolUntil: the 429-streak rule's set-aside (15 min,
    # then a probe), no cooldown of seconds (those live in the instance): set aside too
    aside = {k: v for k, v in f.set_aside_end.items() if k not in f.really_exhausted}
    made = [
        _none(
            "deliverable steps lost = 0 (a deliverable step ends SUCCEEDED, its manifest holding "
            "minImages items)",
            f.lost,
            f"{len(f.lost)} of {f.deliverable} deliverable",
        ),
        _none("0 SUCCEEDED steps without their manifest or with fewer than minImages items", f.misses),
        Check(
            "units == what the stand-in charged, every key, but for units killed instances held or were "
            "reserving as they died",
            not beyond_kills,
            f"{units} units vs {charged} charged"
            + (f"; off by {off}" if off else "")
            + (f"; held by killed instances {_held(f)}" if off else "")
            + (f"; past them {past_held}, reserving at the kills {reserving}" if past_held else "")
            + (f"; beyond them: {', '.join(beyond_kills)}" if beyond_kills else ""),
        ),
        _none(
            "0 wrong charts (against the step's symbol, timeframe, template and the version "
            "current at its claim, by the request the stand-in received)",
            f.wrong,
            f"{len(f.wrong)} wrong",
        ),
        _none("0 steps left RUNNING, READY or PENDING after the settling", f.stuck),
        Check(
            f"calls / charts delivered <= {CALLS_PER_CHART} outside the stand-in's own failures",
            ratio <= CALLS_PER_CHART,
            f"({f.calls_total} - {f.chaos_calls}) / {f.delivered} = {ratio:.3f}",
        ),
        Check(
            "no key set aside past the schedule's end (disabled, exhausted, full, or set aside by the 429 "
            "streak rule) but a really exhausted one",
            not aside,
            ", ".join(f"{k}: {v}" for k, v in sorted(aside.items())) or "none",
        ),
    ]
    if f.outage:
        made.append(
            _none(
                "every deliverable step the outage met ends SUCCEEDED after it",
                f.outage_lost,
                f"{f.outage_met - len(f.outage_lost)} of {f.outage_met} ({f.outage})",
            )
        )
    return made


def _none(target: str, found: list[str], figure: str = "") -> Check:
    """A target met when nothing of its kind was found: the figure, then some of what was."""
    return Check(target, not found, (figure or str(len(found))) + _some(found))


def _held(f: Figures) -> str:
    held = {name: dict(units) for name, units in sorted(f.held_at_kills.items()) if units}
    reserving = {name: n for name, n in sorted(f.reserving_at_kills.items()) if n}
    return f"{held or 'none'} (reserving: {reserving or 'none'})"


def _some(items: list[str], shown: int = 5) -> str:
    if not items:
        return ""
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return ": " + "; ".join(items[:shown]) + more


def report(f: Figures) -> list[str]:
    worker, advance = f.eventarc.get("chart-worker", Counter()), f.eventarc.get("advance-flow", Counter())
    lines = [
        f"seed {f.seed} ({f.profile}): {f.runs_created}/{f.runs_planned} runs created, wall {f.wall:.0f} s, "
        f"load average {f.load}",
        f"steps: {dict(sorted(f.statuses.items()))}; deliverable {f.deliverable}, lost {len(f.lost)}; "
        f"SUCCEEDED by claims {dict(sorted(f.waited.items()))}",
        f"units (usage documents) {sum(f.units.values())}; charged (stand-in's books) "
        f"{sum(f.charged.values())}; calls (stand-in log) {f.calls_total}, of which "
        f"{f.chaos_calls} answered by a window ({dict(sorted(f.calls_by_window.items()))})",
        f"answers: {dict(sorted(f.answers.items()))}",
        f"charts delivered {f.delivered} (in FAILED steps' manifests {f.in_failed_manifests}); "
        f"verdicts {dict(sorted(f.verdicts.items()))}",
        f"worker events: {dict(sorted(worker.items()))}",
        f"advance_flow events: {dict(sorted(advance.items()))}",
        f"HTTP 5xx answered {worker['5xx'] + advance['5xx']}, dead-lettered "
        f"{worker['dead-lettered'] + advance['dead-lettered']}; reaper {dict(sorted(f.reaper.items()))}",
        f"keys really exhausted (stand-in): {', '.join(f.really_exhausted) or 'none'}",
        "keys set aside (seconds during the run): "
        + (", ".join(f"{k} {dict(v)}" for k, v in sorted(f.set_aside_seconds.items()) if v) or "none"),
        "keys set aside at the end: "
        + (", ".join(f"{k}: {v}" for k, v in sorted(f.set_aside_end.items())) or "none"),
        "per key units/charged/calls: "
        + ", ".join(f"{k} {f.units[k]}/{f.charged.get(k, 0)}/{f.calls.get(k, 0)}" for k in sorted(f.units)),
        f"units killed instances held as they died (their logs): {_held(f)} ({len(f.held_at_kills)} killed)",
    ]
    if f.outage:
        lines.append(f"outage {f.outage}: met {f.outage_met} deliverable steps, lost {len(f.outage_lost)}")
    for run, (why, got) in sorted(f.undeliverable.items())[:12]:
        lines.append(f"  not deliverable {run}: {why} -> {got or 'delivered'}")
    for lost in f.lost[:12]:
        lines.append(f"  LOST {lost}")
    lines += [f"conductor: {error}" for error in f.conductor_errors]
    lines += [f"producer: {error}" for error in f.producer_errors]
    return lines
