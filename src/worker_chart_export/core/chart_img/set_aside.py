"""A key set aside for a while, then probed: the fields of a usage document that say so, as
pure rules (docs/design.md, "CHART-IMG answers"). core/chart_img/usage.py applies them in every
reservation; core/chart_img/account_status.py shows them.

Only CHART-IMG's daily-limit wording takes a key out until 00:00 UTC (`exhaustedUntil`).
Every other reason to set a key aside is a judgement, and a judgement is never held for the
rest of the day: after at most `SET_ASIDE_SECONDS` one call, the probe, decides.

| fields | the rule that writes them (for 15 min) |
|---|---|
| `coolUntil`, `coolReason` | 429 streak: 429s for over a minute while other keys served |
| `disabled`, `disabledUntil`, `disabledReason` | key refused for two different requests, no success between |

While `coolUntil` (or `disabledUntil`) is ahead, every reservation on the key is refused
(COOLING, DISABLED). The first reservation after it is the probe: it moves the moment
`PROBE_SECONDS` ahead, so other instances wait for its answer instead of probing too. A
probe answered 200 clears the fields (`serving_again_fields`); answered like the rule's
trigger, the key is set aside again; answered "Limit Exceeded", it is exhausted until
midnight. A `disabled` written without `disabledUntil` (by an older worker) holds for the
UTC day of `windowStart`, as it always did. A `coolUntil` without `coolReason` is someone
else's: respected, never probed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from worker_chart_export.core.naming import moment_of, rfc3339_utc
from worker_chart_export.core.types import ReservationRefusal

COOL_UNTIL = "coolUntil"
COOL_REASON = "coolReason"
DISABLED = "disabled"
DISABLED_UNTIL = "disabledUntil"
DISABLED_REASON = "disabledReason"
SET_ASIDE_SECONDS = 15 * 60.0  # "after at most 15 minutes one probe call decides"
PROBE_SECONDS = 60.0  # how long others wait for a probe's answer (a call's timeout is 45 s)


def disabled_at(doc: Mapping[str, Any], now: datetime, today: str) -> bool:
    """Its key is disabled now: `disabled` written in today's window, and either its
    `disabledUntil` is ahead or (an older worker's) none was written."""
    if doc.get(DISABLED) is not True or doc.get("windowStart") != today:
        return False
    until = moment_of(doc.get(DISABLED_UNTIL))
    return until is None or until > now  # none (or unreadable): the whole UTC day


def refusal_now(doc: Mapping[str, Any], now: datetime, today: str) -> ReservationRefusal | None:
    """Why no reservation may be made on the key now (set aside), or None."""
    if disabled_at(doc, now, today):
        return ReservationRefusal.DISABLED
    cool_until = moment_of(doc.get(COOL_UNTIL))
    if cool_until is not None and cool_until > now:
        return ReservationRefusal.COOLING
    return None


def probe_fields(doc: Mapping[str, Any], now: datetime, today: str) -> dict[str, Any]:
    """When the key's set-aside is over (and not set aside now): the fields that make this
    reservation its probe, holding other instances off for `PROBE_SECONDS`; {} otherwise."""
    hold = rfc3339_utc(now + timedelta(seconds=PROBE_SECONDS))
    fields: dict[str, Any] = {}
    if doc.get(DISABLED) is True and doc.get("windowStart") == today and doc.get(DISABLED_UNTIL):
        fields[DISABLED_UNTIL] = hold
    if doc.get(COOL_REASON) and doc.get(COOL_UNTIL) is not None:
        fields[COOL_UNTIL] = hold
    return fields


def cooling_fields(*, reason: str, now: datetime, seconds: float = SET_ASIDE_SECONDS) -> dict[str, Any]:
    """The 429 streak's set-aside: no call before `now + seconds`, then a probe."""
    return {COOL_UNTIL: rfc3339_utc(now + timedelta(seconds=seconds)), COOL_REASON: reason}


def disabled_until_field(now: datetime, seconds: float = SET_ASIDE_SECONDS) -> dict[str, Any]:
    return {DISABLED_UNTIL: rfc3339_utc(now + timedelta(seconds=seconds))}


def serving_again_fields(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """After a probe answered 200: the set-aside fields cleared (None: nothing to clear)."""
    doc = doc or {}
    fields: dict[str, Any] = {}
    if doc.get(COOL_REASON):
        fields.update({COOL_UNTIL: None, COOL_REASON: None})
    if doc.get(DISABLED) is True:
        fields.update({DISABLED: False, DISABLED_UNTIL: None})
    return fields
