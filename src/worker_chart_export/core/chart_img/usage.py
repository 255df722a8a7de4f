"""One CHART-IMG account's shared state (worker contract §14.4), as pure functions: the daily
usage window, and the pacing every instance shares.

Both usage stores (Firestore in a transaction, in-memory/file under a lock) run these
inside their own atomic section, so the rules live in one place. The document
`chart_img_accounts_usage/{accountId}` holds:
- `usageToday`, `windowStart` (`YYYY-MM-DDT00:00:00Z`), optional `dailyLimit`: the window;
- `tat`: the pacing state, a GCRA "theoretical arrival time" in epoch seconds: the moment
  the next request would be due if requests were sent at exactly the paced rate;
- what CHART-IMG said about the key, for every instance and `worker-chart-export accounts`
  (core/chart_img/account_status.py reads them): `exhaustedUntil` (RFC 3339) and `exhaustedReason`
  after a quota answer (`exhausted_fields`): every reservation refuses the key until then
  (`exhausted_now`), and `usageToday` stays the units really spent (contract §14.4 lets the
  exhaustion be "a separate flag/field": raised to the limit, the count would no longer say
  what CHART-IMG counted, nor what a refund may lower); `disabled` and `disabledReason` once the
  key was refused twice (`disabled_fields`): for the UTC day of `windowStart`, so a key
  rotated under the same id comes back at midnight at the latest (or when an operator
  deletes `disabled`). `coolUntil`, a rate cooldown, is not written by the worker: it lasts
  seconds, and a write would make every other instance's next compare-and-set on the account
  fail and read again (docs/design.md, "CHART-IMG answers");
- `refundedToday`: units given back today (`refund_one`): an attempt whose connection was
  never made (refused, DNS, connect timeout, TLS handshake) cannot have been counted by
  CHART-IMG, so its unit is given back and `usageToday` stays what CHART-IMG could count.

GCRA with emission interval T = 1/rate and burst b (tolerance τ = (b-1)·T): a request
arriving at `now` may be sent at `max(now, tat - τ)`, and moves `tat` to `max(tat, now) + T`.
So b requests go at once, then one every T. A request cannot leave before its reservation is
stored, so `tat` is moved from `now + send_delay` (the store's commit, as recently seen): a
send later than the moment counted would eat the provider's burst. A send EARLIER than that
moment is safe as long as it is not before `tat - τ`: for any interval [s, e], the requests
sent in it then number at most b + (e - s)/T, whatever order they arrive in. So the caller
waits only when the account is really paced, never for the commit estimate.
Because the reservation and the pacing are one read-modify-write of one document, committed
only onto the version it was computed from, every instance sees every earlier reservation:
the rate holds across any number of instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from worker_chart_export.core.chart_img.set_aside import (
    DISABLED,
    DISABLED_REASON,
    disabled_at,
    disabled_until_field,
    probe_fields,
    refusal_now,
)
from worker_chart_export.core.naming import moment_of, rfc3339_utc
from worker_chart_export.core.types import Reservation, ReservationRefusal

# The fields a usage document may hold about CHART-IMG's answers (read by core/chart_img/account_status.py);
# a key set aside and probed: core/chart_img/set_aside.py
EXHAUSTED_UNTIL = "exhaustedUntil"
EXHAUSTED_REASON = "exhaustedReason"
REFUNDED_TODAY = "refundedToday"
QUOTA_REFUSED = "CHART-IMG refused the day's quota"  # an exhaustion's reason when none is given


def window_start(now: datetime) -> str:
    """Start of `now`'s UTC day, as `YYYY-MM-DDT00:00:00Z`."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT00:00:00Z")


def next_utc_midnight(now: datetime) -> datetime:
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


@dataclass(frozen=True)
class Pacing:
    """How fast one account may be called: `rate_per_second` with `burst` banked.

    `arrival_jitter` is how much later than its slot a request may reach the provider (a
    thread woken late, a slow connection) relative to the others: the banked burst is used
    that much less, so that a late burst followed by an on-time request still fits the
    provider's bucket (GCRA's cell delay variation tolerance)."""

    rate_per_second: float
    burst: int
    arrival_jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_per_second <= 0 or self.burst < 1 or self.arrival_jitter < 0:
            raise ValueError("pacing needs rate_per_second > 0, burst >= 1 and arrival_jitter >= 0")

    @property
    def interval(self) -> float:
        return 1.0 / self.rate_per_second

    @property
    def tolerance(self) -> float:
        return max(0.0, (self.burst - 1) * self.interval - self.arrival_jitter)

    def send_time(self, tat: float | None, now: float) -> float:
        """When a request arriving at `now` may be sent (epoch seconds)."""
        return now if tat is None else max(now, tat - self.tolerance)

    def next_tat(self, tat: float | None, now: float) -> float:
        return (now if tat is None else max(tat, now)) + self.interval


@dataclass(frozen=True)
class ReservationRequest:
    """`count` reservations wanted on one account, with its configured limit and pacing."""

    account_id: str
    count: int
    default_limit: int
    pacing: Pacing | None = None


def daily_limit_of(doc: Mapping[str, Any] | None, default_limit: int) -> int:
    """The document's `dailyLimit` overrides the configured one (contract §14.4)."""
    limit = (doc or {}).get("dailyLimit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return default_limit


def usage_today(doc: Mapping[str, Any] | None, now: datetime) -> int:
    """Units used in `now`'s UTC day: a missing or previous-day window counts as zero."""
    doc = doc or {}
    return _count(doc.get("usageToday")) if doc.get("windowStart") == window_start(now) else 0


def refunded_today(doc: Mapping[str, Any] | None, now: datetime) -> int:
    """Units given back in `now`'s UTC day (calls that never left): 0 for an older window."""
    doc = doc or {}
    if doc.get("windowStart") != window_start(now):
        return 0
    return _count(doc.get(REFUNDED_TODAY))


def _count(value: Any) -> int:
    """A stored count as a non-negative int (anything else counts as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def exhausted_now(doc: Mapping[str, Any] | None, now: datetime) -> datetime | None:
    """Until when CHART-IMG said the key's day is used up (its `exhaustedUntil`, when still
    ahead of `now`), else None."""
    until = moment_of((doc or {}).get(EXHAUSTED_UNTIL))
    return until if until is not None and until > now else None


def disabled_now(doc: Mapping[str, Any] | None, now: datetime) -> bool:
    """The key is disabled at `now` (refused for two different requests, until its
    `disabledUntil`; a `disabled` of an older window is over): core/chart_img/set_aside.py."""
    return disabled_at(doc or {}, now, window_start(now))


def tat_of(doc: Mapping[str, Any] | None) -> float | None:
    tat = (doc or {}).get("tat")
    return float(tat) if isinstance(tat, int | float) and not isinstance(tat, bool) else None


@dataclass(frozen=True)
class ReservationTime:
    """When a reservation is asked (`now`), how far away its send slot may be (`max_wait`
    seconds), and how long after `now` its request can leave at the earliest (`send_delay`,
    the store's commit as recently seen: see above)."""

    now: datetime
    max_wait: float = float("inf")
    send_delay: float = 0.0


def reserve_one(
    account_id: str,
    doc: Mapping[str, Any] | None,
    *,
    default_limit: int,
    pacing: Pacing | None = None,
    at: ReservationTime,
) -> tuple[dict[str, Any] | None, Reservation]:
    """(fields to write, or None when nothing changes; the reservation).

    Takes one unit of today's quota and, with `pacing`, the next send slot, unless the
    account is exhausted or its next slot is more than `at.max_wait` seconds away. A stale
    window is reset even when nothing is reserved, so the document always describes today.
    """
    now = at.now
    limit = daily_limit_of(doc, default_limit)
    used = usage_today(doc, now)
    today = window_start(now)
    reset = _new_day(doc, today, used)
    set_aside = refusal_now(doc or {}, now, today)
    if set_aside is not None:
        return None, Reservation(account_id, False, used, limit, refusal=set_aside)
    if used >= limit or exhausted_now(doc, now) is not None:
        return reset, Reservation(account_id, False, used, limit, refusal=ReservationRefusal.EXHAUSTED)
    probe = probe_fields(doc or {}, now, today)  # set aside till now: this call decides
    update: dict[str, Any] = {**(reset or {}), **probe, "windowStart": today, "usageToday": used + 1}
    send_at = now
    if pacing is not None:
        moment, tat = now.timestamp(), tat_of(doc)
        wait = pacing.send_time(tat, moment) - moment
        if wait > at.max_wait:
            busy = Reservation(account_id, False, used, limit, refusal=ReservationRefusal.BUSY, tat=tat)
            return reset, busy
        update["tat"] = pacing.next_tat(tat, moment + at.send_delay)
        send_at = now + timedelta(seconds=wait)
    reservation = Reservation(
        account_id,
        True,
        used + 1,
        limit,
        send_at=send_at,
        tat=update.get("tat"),
        day=today,
        probe=bool(probe),
    )
    return update, reservation


def _new_day(doc: Mapping[str, Any] | None, today: str, used: int) -> dict[str, Any] | None:
    """The fields that make an older window today's (a key disabled that day is tried again)."""
    doc = doc or {}
    if doc.get("windowStart") == today:
        return None
    fields = _window_fields(doc, today, used)
    if doc.get(DISABLED) is True:
        fields[DISABLED] = False
    return fields


def _window_fields(doc: Mapping[str, Any], today: str, used: int) -> dict[str, Any]:
    """The window made `today`'s with `used` units; an older day's units given back no
    longer count (so they are written as 0 when the document has the field)."""
    fields: dict[str, Any] = {"windowStart": today, "usageToday": used}
    if REFUNDED_TODAY in doc and doc.get("windowStart") != today:
        fields[REFUNDED_TODAY] = 0
    return fields


@dataclass(frozen=True)
class Refund:
    """What giving back one unit did: the account's count and units given back today after
    it, or `given_back` False (nothing written) and why."""

    account_id: str
    given_back: bool
    usage_today: int
    refunded_today: int
    why_not: str | None = None


def refund_one(
    account_id: str, doc: Mapping[str, Any] | None, *, day: str
) -> tuple[dict[str, Any] | None, Refund]:
    """(fields to write, or None; the refund) of one unit reserved in the window `day` by an
    attempt that provably never reached CHART-IMG (its connection was never made): one unit
    less in `usageToday`, one more in `refundedToday`, in the same document. The pacing state
    `tat` is untouched: the slot was taken, and leaving it spent only paces more gently.
    Nothing is given back when the document no longer describes `day` (a new UTC day started
    the count again) or when nothing is counted. An exhausted key's unit is given back too:
    its exhaustion is a field of its own (`exhausted_fields`), its count the units spent."""
    doc = doc or {}
    used, refunded = _count(doc.get("usageToday")), _count(doc.get(REFUNDED_TODAY))
    why_not = None
    if doc.get("windowStart") != day:
        why_not = "a new UTC day began: its count started again"
    elif used == 0:
        why_not = "no unit counted"
    if why_not is not None:
        return None, Refund(account_id, False, used, refunded, why_not)
    update = {"usageToday": used - 1, REFUNDED_TODAY: refunded + 1}
    return update, Refund(account_id, True, used - 1, refunded + 1)


def reserve_many(
    request: ReservationRequest, doc: Mapping[str, Any] | None, at: ReservationTime
) -> tuple[dict[str, Any] | None, list[Reservation]]:
    """`request.count` reservations on one account in one write: exactly what as many
    reserve_one calls in a row would give, stopping at the first refusal (which ends the
    list, so a caller sees why the rest was not reserved). (fields to write, or None;
    reservations)."""
    update: dict[str, Any] | None = None
    reservations: list[Reservation] = []
    current: dict[str, Any] = dict(doc or {})
    for _ in range(request.count):
        fields, reservation = reserve_one(
            request.account_id, current, default_limit=request.default_limit, pacing=request.pacing, at=at
        )
        if fields is not None:
            update = {**(update or {}), **fields}
            current.update(fields)
        reservations.append(reservation)
        if not reservation.reserved:
            break
    return update, reservations


def exhausted_fields(
    doc: Mapping[str, Any] | None,
    *,
    now: datetime,
    reason: str = QUOTA_REFUSED,
) -> dict[str, Any]:
    """Fields that mark the account used up until the end of the UTC day, and why (after
    CHART-IMG's quota answer). The window is made today's; its count is left as it is, the
    units really spent."""
    return {
        **_window_fields(doc or {}, window_start(now), usage_today(doc, now)),
        EXHAUSTED_UNTIL: rfc3339_utc(next_utc_midnight(now)),
        EXHAUSTED_REASON: reason,
    }


def disabled_fields(doc: Mapping[str, Any] | None, *, reason: str, now: datetime) -> dict[str, Any]:
    """Fields that disable the account, and why (its key refused for two different
    requests): for 15 minutes, then a probe (core/chart_img/set_aside.py). The window is made today's,
    so that the day the flag belongs to is the one written."""
    return {
        **_window_fields(doc or {}, window_start(now), usage_today(doc, now)),
        DISABLED: True,
        **disabled_until_field(now),
        DISABLED_REASON: reason,
    }
