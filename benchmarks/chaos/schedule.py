"""The seeded schedule of bad luck and the producer's steady traffic (issue 27). Pure: the same
seed, profile, accounts and templates give the same schedule, so a run can be replayed by its
seed (what happens inside it still depends on timing: the schedule is what is replayed).

Times are seconds after the schedule's start. A window is one piece of bad luck, named
`<kind>#<n>` so a failed step can name the window that failed it; an instant (a template
edit, a key spent by another client) is a window with end == start, or to the schedule's end.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    REFUSE = "refuse"  # CHART-IMG refuses connections (its listening socket closed)
    OUTAGE = "outage"  # the same, for longer than a step's budget (minutes: the full mode's)
    THROTTLE = "throttle"  # every key hears 429 "Too Many Requests" (CHART-IMG-wide)
    FAULT_500 = "fault_500"  # every admitted request answered 500 "Something Went Wrong"
    FAULT_504 = "fault_504"  # every admitted request answered 504 "External Request Timeout"
    KEY_EXHAUSTED = "key_exhausted"  # another client spends one key's day: "Limit Exceeded"
    TEMPLATE_401 = "template_401"  # one template's requests draw 401 "Invalid Request"
    TEMPLATE_EDIT = "template_edit"  # a template edited in Firestore (an instant)
    FIRESTORE_PAUSE = "firestore_pause"  # the emulator SIGSTOPped, then SIGCONTinued
    INSTANCE_KILL = "instance_kill"  # a worker instance SIGKILLed, restarted at the end


@dataclass(frozen=True)
class Window:
    kind: Kind
    number: int  # 1, 2, ... within its kind
    start: float
    end: float
    target: str = ""  # the instance, account or template it hits, if any

    @property
    def name(self) -> str:
        return f"{self.kind.value}#{self.number}"

    def overlaps(self, start: float, end: float) -> bool:
        """Whether [start, end] meets the window (an instant meets what contains it)."""
        return self.start <= end and start <= self.end


@dataclass(frozen=True)
class PlannedRun:
    """One flow_run the producer creates: when, its base symbol (unique: the stand-in's log
    tells the runs apart by it) and the templates of its one CHART_EXPORT step."""

    index: int
    at: float
    symbol: str
    templates: tuple[str, ...]


@dataclass(frozen=True)
class Span:
    """How many windows of a kind, and how long each lasts (seconds, drawn in [low, high])."""

    count: int
    low: float
    high: float


@dataclass(frozen=True)
class Profile:
    name: str
    duration: float  # seconds of traffic and bad luck
    runs: int  # created at a steady pace over `duration`
    min_images: int
    refuse: Span
    throttle: tuple[Span, ...]  # several lengths: a long one (over a minute) and short ones
    fault_500: Span
    fault_504: Span
    firestore_pause: Span
    instance_kill: Span  # how long the instance stays dead
    template_edits: int
    refused_template_share: float  # share of runs whose step asks for the 401 template
    # after the schedule: how long the steps have to finish, counted in the reaper's passes
    # (settle_seconds / its interval), an event, so a busy machine's slower passes stretch it;
    # it ends as soon as no step is unfinished. Several times a step's longest wait (60 s,
    # chaos/fleet.py), so a step still waiting at the schedule's end gets its next attempts
    settle_seconds: float
    calm_tail: float = 0.2  # share of the duration at its end with no new window
    # one refusal longer than a step's budget, starting within these shares of the windows'
    # span; no other window meets it (the windows of each kind are placed around it), so
    # each kind's bad luck is seen on its own and the outage is the outage alone
    outage: Span | None = None
    outage_start: tuple[float, float] = (0.25, 0.3)


# The full mode's traffic lasts 10 minutes: the windows of the other kinds before and after a
# 5-minute outage (issue 37), and a calm tail that sees the outage's steps come back. Its
# pace (a run every 1.33 s, 450 runs) keeps the day's units (~1800 charts) within what the 10
# keys hold even when the key another client spends is a MEGA one (3750 - 1000).
FULL = Profile(
    name="full",
    duration=600.0,
    runs=450,
    min_images=3,
    refuse=Span(2, 6.0, 12.0),
    # issue 26: a minute of CHART-IMG-wide 429s retired every key until midnight
    throttle=(Span(1, 65.0, 75.0), Span(1, 6.0, 12.0)),
    fault_500=Span(2, 3.0, 6.0),
    fault_504=Span(2, 3.0, 6.0),
    firestore_pause=Span(2, 3.0, 6.0),
    instance_kill=Span(4, 2.0, 6.0),
    template_edits=3,
    refused_template_share=0.15,
    settle_seconds=300.0,
    outage=Span(1, 290.0, 310.0),
)
SHORT = Profile(
    name="short",
    duration=40.0,
    runs=36,
    min_images=3,
    refuse=Span(1, 4.0, 6.0),
    throttle=(Span(1, 4.0, 7.0),),
    fault_500=Span(1, 2.0, 4.0),
    fault_504=Span(1, 2.0, 4.0),
    firestore_pause=Span(1, 2.0, 4.0),
    instance_kill=Span(1, 2.0, 4.0),
    template_edits=1,
    refused_template_share=0.2,
    settle_seconds=150.0,
)
PROFILES = {profile.name: profile for profile in (FULL, SHORT)}
GAP_SECONDS = 2.0  # between two windows of one kind


@dataclass(frozen=True)
class Schedule:
    seed: int
    profile: Profile
    windows: tuple[Window, ...]
    runs: tuple[PlannedRun, ...]

    @property
    def end(self) -> float:
        return self.profile.duration

    def of_kind(self, kind: Kind) -> list[Window]:
        return [w for w in self.windows if w.kind == kind]

    def named(self, name: str) -> Window:
        return next(w for w in self.windows if w.name == name)

    def actions(self) -> list[tuple[float, str, Window]]:
        """(moment, "start" | "end", window), in time order; an instant only starts."""
        moments = [(w.start, "start", w) for w in self.windows]
        moments += [(w.end, "end", w) for w in self.windows if _has_end(w)]
        return sorted(moments, key=lambda item: (item[0], item[1] == "start", item[2].name))

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "profile": self.profile.name,
            "windows": [{**asdict(w), "kind": w.kind.value, "name": w.name} for w in self.windows],
            "runs": [asdict(r) for r in self.runs],
        }

    def describe(self) -> list[str]:
        """One line per window, in time order."""
        lines = []
        for w in sorted(self.windows, key=lambda w: (w.start, w.name)):
            span = f"{w.start:6.1f} s" + (f" .. {w.end:6.1f} s" if w.end != w.start else "")
            lines.append(f"{w.name:<18} {span:<22} {w.target}")
        return lines


def _has_end(window: Window) -> bool:
    """Windows whose end is an action: the stand-in's modes, the pause, the restart."""
    return window.kind in (
        Kind.REFUSE,
        Kind.OUTAGE,
        Kind.THROTTLE,
        Kind.FAULT_500,
        Kind.FAULT_504,
        Kind.FIRESTORE_PAUSE,
        Kind.INSTANCE_KILL,
    )


def build_schedule(
    seed: int,
    profile: Profile,
    *,
    accounts: Sequence[str],
    templates: Sequence[str],
    refused_template: str,
    instances: int,
) -> Schedule:
    """The schedule of `seed`: windows of every kind placed at random (one kind's windows
    never overlap; kinds do, as bad luck does), and the runs, one every duration / runs."""
    rng = random.Random(seed)
    latest = profile.duration * (1.0 - profile.calm_tail)
    windows: list[Window] = [Window(Kind.TEMPLATE_401, 1, 0.0, profile.duration, refused_template)]
    outage = _outage(rng, profile, latest)
    windows += outage
    windows += _placed(rng, Kind.REFUSE, [profile.refuse], latest, outage)
    windows += _placed(rng, Kind.THROTTLE, list(profile.throttle), latest, outage)
    windows += _placed(rng, Kind.FAULT_500, [profile.fault_500], latest, outage)
    windows += _placed(rng, Kind.FAULT_504, [profile.fault_504], latest, outage)
    windows += _placed(rng, Kind.FIRESTORE_PAUSE, [profile.firestore_pause], latest, outage)
    kills = _placed(rng, Kind.INSTANCE_KILL, [profile.instance_kill], latest, outage)
    windows += [_with_target(w, f"worker-{rng.randrange(instances)}") for w in kills]
    exhausted_at = round(rng.uniform(0.2, 0.5) * profile.duration, 1)
    windows.append(Window(Kind.KEY_EXHAUSTED, 1, exhausted_at, profile.duration, rng.choice(list(accounts))))
    edits = sorted(round(rng.uniform(0.1, 0.9) * latest, 1) for _ in range(profile.template_edits))
    for number, at in enumerate(edits, start=1):
        windows.append(Window(Kind.TEMPLATE_EDIT, number, at, at, rng.choice(list(templates))))
    runs = _traffic(rng, profile, templates, refused_template)
    return Schedule(seed, profile, tuple(sorted(windows, key=lambda w: (w.start, w.name))), runs)


def _with_target(window: Window, target: str) -> Window:
    return Window(window.kind, window.number, window.start, window.end, target)


def _outage(rng: random.Random, profile: Profile, latest: float) -> list[Window]:
    """The profile's outage, if it has one, starting within its shares of the windows' span."""
    if profile.outage is None:
        return []
    length = rng.uniform(profile.outage.low, profile.outage.high)
    start = rng.uniform(*profile.outage_start) * latest
    return [Window(Kind.OUTAGE, 1, round(start, 1), round(start + length, 1))]


def _placed(
    rng: random.Random, kind: Kind, spans: Sequence[Span], latest: float, avoid: Sequence[Window] = ()
) -> list[Window]:
    """Windows of one kind, longest first, each at a random start, none overlapping another
    nor a window of `avoid` (with GAP_SECONDS between): a window that finds no room after 200
    draws is left out."""
    placed: list[Window] = []
    lengths = sorted((rng.uniform(s.low, s.high) for s in spans for _ in range(s.count)), reverse=True)
    for length in lengths:
        for _ in range(200):
            start = rng.uniform(0.05 * latest, max(0.05 * latest, latest - length))
            clash = any(
                start - GAP_SECONDS <= w.end and w.start <= start + length + GAP_SECONDS
                for w in (*placed, *avoid)
            )
            if not clash:
                placed.append(Window(kind, 0, round(start, 1), round(start + length, 1)))
                break
    in_time = sorted(placed, key=lambda w: w.start)
    return [Window(kind, n, w.start, w.end) for n, w in enumerate(in_time, start=1)]


def _traffic(
    rng: random.Random, profile: Profile, templates: Sequence[str], refused_template: str
) -> tuple[PlannedRun, ...]:
    """One run every duration / runs seconds; its step asks for every template, one of them
    replaced by the refused template in `refused_template_share` of the runs."""
    pace = profile.duration / profile.runs
    runs = []
    for index in range(profile.runs):
        chosen = list(templates)
        if rng.random() < profile.refused_template_share:
            chosen[rng.randrange(len(chosen))] = refused_template
        runs.append(PlannedRun(index, round(index * pace, 2), f"C{index:04d}USDT", tuple(chosen)))
    return tuple(runs)


def edited_request(request: dict[str, Any], number: int) -> dict[str, Any]:
    """The template request after edit `number`: narrower by 8 px per edit, theme flipped
    on odd edits (a request CHART-IMG renders differently, valid on every plan)."""
    theme = request.get("theme", "dark")
    flipped = {"dark": "light", "light": "dark"}.get(theme, "dark")
    width = int(request.get("width", 800))
    return {**request, "width": max(400, width - 8), "theme": flipped if number % 2 else theme}
