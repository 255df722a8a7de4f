"""How a user judges what the worker delivered, as pure rules over plain values.

A chart is judged by the digest its PNG carries (the stand-in draws the digest of the body it
was rendered from): it is RIGHT when it is the body of a template version the delivering
execution may have read, STALE when right but not the version current when the manifest was
written, WRONG otherwise (another template's, another version's, not a stand-in PNG at all).
What an execution may have read: the worker caches a template per instance for
TEMPLATE_CACHE_SECONDS (docs/design.md, "Templates come from Firestore ... cached 5 minutes
per instance"), so any version current between max(claim - cache, the instance's start) and
the manifest's writing. A version is current from its update time until the next one's.

A FAILED step is explained when the schedule shows why: a call of its run answered by a
window (the stand-in tags them), a kill of the instance that held its request, or a refusal,
or a Firestore pause during its life; or a CHART-IMG-wide throttle during its life when a
chart of it failed without any call: every key then cools (up to core.key_history's
`max_cooldown`, 30 s, past the window's end, which is how far a throttle reaches), and a
chart that finds them all cooling beyond its budget fails with no call at all ("the step's
time budget ran out before CHART-IMG could be called"), so no call of its run names the
window. Otherwise the step is listed as unexplained.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from harness.naming_contract import request_sha256
from worker_chart_export.core.chart_img.key_history import DEFAULT_POLICY
from worker_chart_export.core.templates.chart_request import build_request_body

TEMPLATE_CACHE_SECONDS = 300.0
TIMEZONE = "Etc/UTC"


class Verdict(StrEnum):
    RIGHT = "right"
    STALE = "stale"  # right by the documented cache, yet older than the template when delivered
    WRONG = "wrong"


@dataclass(frozen=True)
class Version:
    since: datetime
    request: Mapping[str, Any]


@dataclass(frozen=True)
class Rendered:
    """One chart of a manifest, with what its judgement needs."""

    digest: str | None  # from its PNG
    versions: Sequence[Version]  # its template's, oldest first
    chart_img_symbol: str
    interval: str
    read_from: datetime  # the earliest moment the execution may have read the template at
    written: datetime  # the manifest's createdAt


def digest_of(version: Version, chart_img_symbol: str, interval: str) -> str:
    return request_sha256(build_request_body(version.request, chart_img_symbol, interval, TIMEZONE))


def current_between(versions: Sequence[Version], start: datetime, end: datetime) -> list[Version]:
    """The versions current at some moment of [start, end]."""
    ordered = sorted(versions, key=lambda v: v.since)
    nexts = [v.since for v in ordered[1:]] + [None]
    return [
        v
        for v, until in zip(ordered, nexts, strict=True)
        if v.since <= end and (until is None or until > start)
    ]


def judge(chart: Rendered) -> Verdict:
    may_have_read = current_between(chart.versions, chart.read_from, chart.written)
    acceptable = {digest_of(v, chart.chart_img_symbol, chart.interval) for v in may_have_read}
    if chart.digest is None or chart.digest not in acceptable:
        return Verdict.WRONG
    latest = current_between(chart.versions, chart.written, chart.written)
    current = {digest_of(v, chart.chart_img_symbol, chart.interval) for v in latest}
    return Verdict.RIGHT if chart.digest in current else Verdict.STALE


def read_from(claimed: datetime, instance_started: datetime | None) -> datetime:
    """The earliest read of a template an execution claimed at `claimed` may use."""
    cached = claimed - timedelta(seconds=TEMPLATE_CACHE_SECONDS)
    return cached if instance_started is None else max(cached, instance_started)


@dataclass(frozen=True)
class Span:
    """A window as it happened (wall clock); `end` None: it lasts to the end of the run."""

    name: str
    kind: str
    start: datetime
    end: datetime | None
    target: str = ""

    def meets(self, start: datetime, end: datetime, reach: float = 0.0) -> bool:
        """Whether the window, `reach` seconds longer, overlaps [start, end]."""
        return self.start <= end and (self.end is None or start <= self.end + timedelta(seconds=reach))


LIFE_KINDS = ("refuse", "firestore_pause")  # what meets a step by overlapping its life
# what meets a step whose chart failed without a call, and how far past its end (seconds)
COOLING_KINDS = {"throttle": DEFAULT_POLICY.max_cooldown}


def explain(
    life: tuple[datetime, datetime],
    tagged: Iterable[str],
    killed_holding_it: Iterable[str],
    spans: Iterable[Span],
    *,
    uncalled: bool = False,
) -> list[str]:
    """The windows that explain a FAILED step: those that answered its calls, the kills of an
    instance holding its request, the refusals and pauses during its life (created..finished),
    and, when a chart of it failed without any call (`uncalled`), the throttles during its
    life or within their keys' cooldowns after."""
    named = set(tagged) | set(killed_holding_it)
    named |= {s.name for s in spans if s.kind in LIFE_KINDS and s.meets(*life)}
    if uncalled:
        named |= {s.name for s in spans if s.kind in COOLING_KINDS and s.meets(*life, COOLING_KINDS[s.kind])}
    return sorted(named)
