"""How a user judges what the worker delivered, as pure rules over plain values (issue 37).

A chart is judged against what its step asked, through the request the stand-in received for
it: its PNG carries the digest of the body the stand-in drew it for (chaos_stand_in.py), and
the stand-in's log says, for that digest, the body's symbol, interval, template and which
version of the template it is. The chart is RIGHT when that request is the step's: the
producer's symbol written by the template's own `chartImgSymbolTemplate`, the step's
timeframe, the template the manifest names for it, and a version no older than the one
current when the delivering execution claimed the step (a version is current from its update
time in Firestore until the next one's; the worker reads the templates for each step, so an
edit is what the next claim uses). Otherwise it is WRONG, naming why: a version older than
the one current at the claim is "stale", and wrong. Nothing here rebuilds a body with the
worker's code or reads the manifest's meta: the expectation is the producer's and the
templates', the evidence the stand-in's.

A step is deliverable when the schedule and the stand-in's books say CHART-IMG would have
given it its charts: at least minImages of its templates are ones CHART-IMG renders (not the
template it answers 401), some key still had units when the step ended (the stand-in's
`exhausted_at`; every template of the benchmark fits every plan, so any key could serve it),
and no window longer than a step's attempts allow (the fleet's patience: its waits and its
attempts' budgets) met its life. A deliverable step is lost unless it ended SUCCEEDED with
its manifest holding at least minImages items; a SUCCEEDED step without its manifest, or
with fewer items, is a miss whatever its deliverability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

SYMBOL_PLACEHOLDER = "{symbol}"  # the templates' chartImgSymbolTemplate (contract §13.3)


class Verdict(StrEnum):
    RIGHT = "right"
    WRONG = "wrong"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    why: str = ""  # for a wrong chart: what differs from what the step asked


@dataclass(frozen=True)
class Version:
    """A template's version as the stand-in knows it (its label) and since when it is current."""

    label: str
    since: datetime


@dataclass(frozen=True)
class Asked:
    """What a step asked for one chart: from the producer, the templates and the claim."""

    template: str
    chart_img_symbol: str
    interval: str
    claimed: datetime  # when the delivering execution claimed the step


@dataclass(frozen=True)
class Received:
    """A request the stand-in answered with a PNG, as its log tells it."""

    template: str | None
    version: str | None
    symbol: str | None
    interval: str | None
    arrived: datetime


def chart_img_symbol(symbol_template: str, symbol: str) -> str:
    """What the step's symbol becomes for CHART-IMG through the template's own pattern."""
    return symbol_template.replace(SYMBOL_PLACEHOLDER, symbol)


def current_at(versions: Sequence[Version], moment: datetime) -> Version | None:
    """The version current at `moment` (None: none was written yet)."""
    earlier = [v for v in versions if v.since <= moment]
    return max(earlier, key=lambda v: v.since) if earlier else None


def acceptable(versions: Sequence[Version], claimed: datetime, arrived: datetime) -> set[str]:
    """The versions a chart may be drawn from: the one current at the claim, and any written
    between the claim and the request's arrival (a read after the claim sees it)."""
    at_claim = current_at(versions, claimed)
    later = {v.label for v in versions if claimed < v.since <= arrived}
    return later | ({at_claim.label} if at_claim is not None else set())


def judge(asked: Asked, received: Sequence[Received], versions: Sequence[Version]) -> Judgement:
    """A chart against what its step asked: `received`, the stand-in's records of the requests
    it drew a PNG with this chart's digest for; `versions`, the asked template's."""
    if not received:
        return Judgement(Verdict.WRONG, "no request the stand-in answered carries its digest")
    request = max(received, key=lambda r: r.arrived)  # one body: the same request each time
    differs = [
        f"{what} {got!r}, asked {wanted!r}"
        for what, got, wanted in (
            ("template", request.template, asked.template),
            ("symbol", request.symbol, asked.chart_img_symbol),
            ("interval", request.interval, asked.interval),
        )
        if got != wanted
    ]
    if differs:
        return Judgement(Verdict.WRONG, "; ".join(differs))
    allowed = acceptable(versions, asked.claimed, request.arrived)
    if request.version not in allowed:
        current = current_at(versions, asked.claimed)
        return Judgement(
            Verdict.WRONG,
            f"stale: drawn from version {request.version!r}, older than "
            f"{current.label if current else None!r} current at its claim",
        )
    return Judgement(Verdict.RIGHT)


@dataclass(frozen=True)
class Span:
    """A window as it happened (wall clock); `end` None: it lasts to the end of the run."""

    name: str
    kind: str
    start: datetime
    end: datetime | None
    target: str = ""

    def meets(self, start: datetime, end: datetime) -> bool:
        """Whether the window overlaps [start, end]."""
        return self.start <= end and (self.end is None or start <= self.end)

    def seconds(self, until: datetime) -> float:
        return ((self.end or until) - self.start).total_seconds()


@dataclass(frozen=True)
class StepAsked:
    """A step as the producer wrote it, and its life (created .. finished, or the count's end)."""

    templates: Sequence[str]
    min_images: int
    created: datetime
    ended: datetime


def undeliverable(
    step: StepAsked,
    *,
    refused_templates: set[str],
    exhausted_at: Mapping[str, datetime | None],
    spans: Sequence[Span],
    patience_seconds: float,
) -> str | None:
    """Why CHART-IMG could not have given the step its charts, or None: it is deliverable.
    `refused_templates`: the templates CHART-IMG answers 401 (the schedule's); `exhausted_at`:
    per key, when its day was used up (the stand-in's books); `patience_seconds`: the span a
    step's attempts cover at most (their waits and budgets)."""
    renderable = [t for t in step.templates if t not in refused_templates]
    if len(renderable) < step.min_images:
        return (
            f"its requests: CHART-IMG renders {len(renderable)} of its {len(step.templates)} templates, "
            f"fewer than minImages {step.min_images}"
        )
    moments = list(exhausted_at.values())
    if moments and all(m is not None and m <= step.ended for m in moments):
        return f"real exhaustion: every key's day used up by {max(m for m in moments if m):%H:%M:%S}"
    longer = [
        s.name
        for s in spans
        if s.end is not None
        and s.seconds(step.ended) > patience_seconds
        and s.meets(step.created, step.ended)
    ]
    if longer:
        span = f"{patience_seconds:.0f} s"
        return f"a window longer than its attempts allow ({span}): {', '.join(longer)}"
    return None


def outcome(status: str, items: int | None, min_images: int, error: Mapping[str, object]) -> str | None:
    """What the user got short of the step's charts, or None: it was delivered (SUCCEEDED, its
    manifest holding at least minImages items). `items` None: no manifest."""
    if status == "SUCCEEDED":
        if items is None:
            return "SUCCEEDED without its manifest"
        if items < min_images:
            return f"SUCCEEDED with {items} items, fewer than minImages {min_images}"
        return None
    if status == "FAILED":
        return f"FAILED {error.get('code', '?')}: {str(error.get('message', ''))[:160]}"
    return f"left {status}"
