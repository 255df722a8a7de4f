"""A chaos run's figures, held to issue 27's targets, and printed as a user reads them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CALLS_PER_CHART = 1.05


@dataclass
class Figures:
    seed: int
    profile: str
    runs_planned: int = 0
    runs_created: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    stuck: list[str] = field(default_factory=list)  # "runId STATUS" of steps not finished
    units: dict[str, int] = field(default_factory=dict)  # usage documents, per key
    calls: dict[str, int] = field(default_factory=dict)  # the stand-in's log, per key
    # units the killed instances held when they died, per key (their logs: units_in_hand)
    held_at_kills: dict[str, int] = field(default_factory=dict)
    really_exhausted: list[str] = field(default_factory=list)  # by the stand-in's own count
    answers: Counter[str] = field(default_factory=Counter)  # "200", "429 Too Many Requests"...
    calls_by_window: Counter[str] = field(default_factory=Counter)  # the stand-in's own failures
    delivered: int = 0  # charts in the manifests of SUCCEEDED steps
    in_failed_manifests: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    eventarc: dict[str, Counter[str]] = field(default_factory=dict)
    set_aside_end: dict[str, str] = field(default_factory=dict)  # key -> "reason until"
    set_aside_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    failed: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # run -> (code, windows)
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


@dataclass(frozen=True)
class Check:
    target: str
    ok: bool
    figure: str


def checks(f: Figures) -> list[Check]:
    # every key, the exhausted ones too: the worker records an exhaustion in its own field
    # (exhaustedUntil), so usageToday stays the units really spent
    units, calls = sum(f.units.values()), sum(f.calls.get(k, 0) for k in f.units)
    off = [f"{k} {n} vs {f.calls.get(k, 0)}" for k, n in sorted(f.units.items()) if n != f.calls.get(k, 0)]
    # A unit taken, then its instance SIGKILLed before the call left, is counted for no call:
    # no worker can avoid that instant between two systems (it errs one unit high, never
    # low). Such a key is within the target only by the units its killed instance's log
    # shows in hand at its death, no more.
    beyond_kills = [
        f"{k} {n} vs {f.calls.get(k, 0)}"
        for k, n in sorted(f.units.items())
        if not 0 <= n - f.calls.get(k, 0) <= f.held_at_kills.get(k, 0)
    ]
    died_with = {k: n - f.calls.get(k, 0) for k, n in sorted(f.units.items()) if n != f.calls.get(k, 0)}
    paid = f.calls_total - f.chaos_calls
    ratio = paid / f.delivered if f.delivered else float("inf")
    unexplained = sorted(run for run, (_, windows) in f.failed.items() if not windows)
    aside = {
        k: v
        for k, v in f.set_aside_end.items()
        if k not in f.really_exhausted and not v.startswith("cooling")
    }
    return [
        Check(
            "units == calls the stand-in counted, exactly (every key), but for units a killed "
            "instance held as it died (its log)",
            not beyond_kills,
            f"{units} units vs {calls} calls"
            + (f"; per key: {', '.join(off)}" if off else "")
            + (f"; held by killed instances {died_with} of {f.held_at_kills}" if died_with else "")
            + (f"; beyond them: {', '.join(beyond_kills)}" if beyond_kills else ""),
        ),
        Check(
            f"calls / charts delivered <= {CALLS_PER_CHART} outside the stand-in's own failures",
            ratio <= CALLS_PER_CHART,
            f"({f.calls_total} - {f.chaos_calls}) / {f.delivered} = {ratio:.3f}",
        ),
        Check("0 wrong charts", not f.wrong, f"{len(f.wrong)} wrong" + _some(f.wrong)),
        Check(
            "0 steps left RUNNING, READY or PENDING after the settling",
            not f.stuck,
            f"{len(f.stuck)}" + _some(f.stuck),
        ),
        Check(
            "no key set aside past the schedule's end but the one really exhausted",
            not aside,
            ", ".join(f"{k}: {v}" for k, v in sorted(aside.items())) or "none",
        ),
        Check(
            "every FAILED step explained by a window",
            not unexplained,
            f"{len(f.failed) - len(unexplained)}/{len(f.failed)} explained" + _some(unexplained),
        ),
    ]


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
        f"steps: {dict(sorted(f.statuses.items()))}",
        f"units (usage documents) {sum(f.units.values())}; calls (stand-in log) {f.calls_total}, of which "
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
        "per key units/calls: " + ", ".join(f"{k} {f.units[k]}/{f.calls.get(k, 0)}" for k in sorted(f.units)),
        f"units killed instances held as they died (their logs): {f.held_at_kills or 'none'}",
    ]
    codes = Counter(code for code, _ in f.failed.values())
    lines.append(f"FAILED steps by code: {dict(sorted(codes.items()))}")
    for run, (code, windows) in sorted(f.failed.items())[:12]:
        lines.append(f"  {run}: {code} <- {', '.join(windows) or 'UNEXPLAINED'}")
    lines += [f"conductor: {error}" for error in f.conductor_errors]
    lines += [f"producer: {error}" for error in f.producer_errors]
    return lines


def really_exhausted(usage: list[dict[str, Any]], calls: dict[str, int]) -> list[str]:
    """Keys whose day is really used up: by the stand-in's own count (another client's units,
    or our admitted calls), or by our calls (each one a unit, as the first target counts)."""
    return sorted(
        a["account_id"]
        for a in usage
        if a["quota"] is not None and max(a["used"], calls.get(a["account_id"], 0)) >= a["quota"]
    )
