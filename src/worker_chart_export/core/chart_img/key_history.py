"""What one key's recent answers say, as pure rules (docs/design.md, "CHART-IMG answers").

The limiter keeps one `KeyHistory` per account in the process (adapters/chart_img/account_views.py)
and applies the verdicts; nothing here reads a clock: moments come in as seconds.

- **Cooldown** after a 429 that is not the day's quota (`Too Many Requests`, an empty or an
  unknown 429): `Retry-After` when CHART-IMG sends one (up to `max_retry_after`), else 1, 2,
  4, 8, 16, 30, 30... s, doubling with each cooldown of the streak. A success on the key ends
  the streak. A 429 that arrives while the key already cools answers a request sent before
  the cooldown began: it is counted among the answers seen, and begins no new cooldown.
- **The streak rule**: a key that answered 429 through `streak_cooldowns` cooldowns or more,
  its first and last such answers more than `streak_span` seconds apart, while our own count
  says it has quota left AND other keys served meanwhile without hearing 429 themselves (one
  succeeded since this key's previous 429, none answered 429 since), is set aside for
  `set_aside_seconds` (15 min), then probed (core/chart_img/set_aside.py). It is that key's
  problem: CHART-IMG's count is ahead of ours (another client uses the key), or it words the
  daily quota in a way we do not know. When no other key serves alone (every key hears 429,
  one throttle after another, or there is only one), nobody can be blamed: CHART-IMG is
  throttling, the keys only cool down (escalating, or Retry-After) and none is set aside.
- **Refusals**: a key refused (401, 403 `Forbidden`) moves the call to another account; it
  is disabled when refused again for another request (`refusals_to_disable` different
  requests in a row, no success between): one request refused twice (a chart's retry, or
  the same body in two steps) counts once, since the request may be what is refused.

Every history is one UTC day's: a new day starts it afresh (the daily quota restarts too).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from worker_chart_export.core.retry import KEY_COOLDOWN, KEY_RETRY_AFTER_MAX_SECONDS

_MAX_KEPT = 20  # answers kept per streak: enough to say what was seen, bounded
_MAX_WORDS = 80  # characters of CHART-IMG's message kept per answer


@dataclass(frozen=True)
class Answer:
    """One refusal as seen: the HTTP status, CHART-IMG's own words ('' when none), its
    Retry-After in seconds, if any, and the request it answered (its body's digest; None:
    unknown). The last two are not part of what the answer *is*: two 429s that say the same
    are the same answer, counted together, whatever wait each asked for."""

    status: int
    message: str = ""
    retry_after: float | None = field(default=None, compare=False)
    request: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", " ".join(self.message.split())[:_MAX_WORDS])

    def describe(self) -> str:
        return f'{self.status} "{self.message}"' if self.message else f"{self.status} without a message"


@dataclass(frozen=True)
class KeyPolicy:
    # the cooldown's numbers are core.retry's (KEY_COOLDOWN, KEY_RETRY_AFTER_MAX_SECONDS)
    first_cooldown: float = KEY_COOLDOWN.base  # seconds, after the first 429 of a streak
    max_cooldown: float = KEY_COOLDOWN.cap  # where the doubling stops
    max_retry_after: float = (
        KEY_RETRY_AFTER_MAX_SECONDS  # a longer one is held to this (a misread date parks no key)
    )
    streak_cooldowns: int = 5  # "several cooldowns"
    streak_span: float = 60.0  # seconds between the streak's first and last 429, at least
    refusals_to_disable: int = 2
    set_aside_seconds: float = 15 * 60.0  # a key the streak rule set aside: then one probe

    def cooldown(self, retry_after: float | None, cooldowns_before: int) -> float:
        """Seconds of the next cooldown: Retry-After when given, else the escalating backoff."""
        if retry_after is not None and retry_after > 0:
            return min(retry_after, self.max_retry_after)
        return min(self.max_cooldown, self.first_cooldown * 2.0 ** min(cooldowns_before, 32))


DEFAULT_POLICY = KeyPolicy()


@dataclass(frozen=True)
class KeyHistory:
    day: str = ""  # the UTC day it describes (core.chart_img.usage.window_start)
    cooldowns: int = 0  # cooldowns begun in the current 429 streak
    first_at: float | None = None  # the streak's first 429
    last_at: float | None = None  # the streak's latest 429
    cool_until: float = 0.0  # no call before this moment
    seen: int = 0  # 429s of the streak, every one
    answers: tuple[Answer, ...] = ()  # the streak's last _MAX_KEPT 429s
    refusals: tuple[Answer, ...] = ()  # key refusals since the last success

    def on(self, day: str) -> KeyHistory:
        """This history on `day`: itself, or a fresh one when the day changed."""
        return self if day == self.day else KeyHistory(day=day)


@dataclass(frozen=True)
class Streak:
    """What made a key's 429s its own problem (set aside): for the ERROR line and the reason."""

    cooldowns: int
    span_seconds: float
    seen: int
    answers: tuple[tuple[Answer, int], ...]  # each distinct answer (of the last kept) and how often

    def reason(self, used: int, limit: int) -> str:
        said = ", ".join(f"{a.describe()} x{n}" for a, n in self.answers)
        return (
            f"429 streak: CHART-IMG answered 429 through {self.cooldowns} cooldowns over "
            f"{self.span_seconds:.0f} s with {used} of {limit} used by our count, while other keys "
            f"served: {said}"
        )

    def as_log(self) -> list[dict[str, Any]]:
        return [{"httpStatus": a.status, "message": a.message, "times": n} for a, n in self.answers]


@dataclass(frozen=True)
class RateVerdict:
    cooling: float  # seconds until the key may be called again (0 when set aside instead)
    set_aside: Streak | None = None  # the streak rule met: set aside, then probed
    throttled: bool = False  # every usable key hears 429 at once: CHART-IMG's throttling


@dataclass(frozen=True)
class StreakEvidence:
    """What decides whether a key's 429 streak is its own problem: whether our count says it
    has quota left, and what the other keys did lately (monotonic moments; None: never):
    their latest success, and their latest 429 that was not the day's quota."""

    has_quota: bool = True
    served_at: float | None = None
    limited_at: float | None = None

    def blames_the_key(self, previous: float | None) -> bool:
        """It has quota, another key served since `previous` and none heard a 429 meanwhile:
        the trouble is this key's alone. A 429 another key heard in that time (CHART-IMG
        throttling every key, one window after another) makes it nobody's."""
        if not self.has_quota:
            return False
        if previous is None or self.served_at is None or self.served_at <= previous:
            return False
        return self.limited_at is None or self.limited_at <= previous


def after_rate_limit(
    history: KeyHistory,
    answer: Answer,
    *,
    at: float,
    day: str,
    evidence: StreakEvidence = StreakEvidence(),
    policy: KeyPolicy = DEFAULT_POLICY,
) -> tuple[KeyHistory, RateVerdict]:
    """A 429 that is not the day's quota, at `at`: the history after it, and the verdict
    (the cooldown honours the answer's Retry-After when it has one). `evidence`: what alone can
    make the streak this key's problem."""
    history = history.on(day)
    answers = (*history.answers, answer)[-_MAX_KEPT:]
    previous = history.last_at
    if at < history.cool_until:  # sent before the cooldown began: no new one
        history = replace(history, seen=history.seen + 1, answers=answers, last_at=at)
        return history, RateVerdict(history.cool_until - at)
    first_at = at if history.first_at is None else history.first_at
    history = replace(
        history,
        cooldowns=history.cooldowns + 1,
        first_at=first_at,
        last_at=at,
        cool_until=at + policy.cooldown(answer.retry_after, history.cooldowns),
        seen=history.seen + 1,
        answers=answers,
    )
    span = at - first_at
    if (
        evidence.blames_the_key(previous)
        and history.cooldowns >= policy.streak_cooldowns
        and span > policy.streak_span
    ):
        counted = tuple(Counter(history.answers).items())
        streak = Streak(history.cooldowns, span, history.seen, counted)
        return KeyHistory(day=day, refusals=history.refusals), RateVerdict(0.0, streak)
    return history, RateVerdict(history.cool_until - at)


def after_refusal(
    history: KeyHistory, answer: Answer, *, day: str, policy: KeyPolicy = DEFAULT_POLICY
) -> tuple[KeyHistory, tuple[Answer, ...]]:
    """CHART-IMG refused the key: the history after it, and the refusals of different
    requests in a row that disable the key now (empty: not yet, the call only moves to
    another account). The same request refused again replaces its earlier refusal."""
    history = history.on(day)
    earlier = tuple(r for r in history.refusals if answer.request is None or r.request != answer.request)
    refusals = (*earlier, answer)[-policy.refusals_to_disable :]
    if len(refusals) < policy.refusals_to_disable:
        return replace(history, refusals=refusals), ()
    return replace(history, refusals=()), refusals


def after_success(history: KeyHistory) -> KeyHistory:
    """The key answered 200: the 429 streak (and its escalation) and the refusals are over.
    A cooldown already running stays: a success may answer a request sent before it."""
    fresh = KeyHistory(day=history.day, cool_until=history.cool_until)
    return history if history == fresh else fresh


def quota_reason(answer: Answer) -> str:
    """Why an account is exhausted when CHART-IMG said the day's quota is used up."""
    return f"CHART-IMG answered {answer.describe()}: the day's quota"


def refused_reason(refusals: tuple[Answer, ...]) -> str:
    """Why a key is disabled: each refusal in a row."""
    return "CHART-IMG refused the key " + ", then ".join(a.describe() for a in refusals)
