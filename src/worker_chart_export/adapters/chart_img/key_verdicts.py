"""What CHART-IMG said of a key, told to the limiter (api.py tells; the rules:
core.chart_img.key_history, core.chart_img.set_aside): applied to this process's view of the accounts
(account_views.py), logged, and persisted in the usage document when it matters to every
instance and to `worker-chart-export accounts` (exhausted, set aside, disabled, serving
again after a probe). Best effort: the process keeps to the verdict even when the store
cannot be written. A base of AccountLimiter, which supplies the views, the store and the
clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.account_views import AccountViews
from worker_chart_export.adapters.chart_img.usage_store import UsageStore
from worker_chart_export.core.chart_img.key_history import Answer, RateVerdict, quota_reason, refused_reason
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.logs import get_logger

# A key's check with a known-good chart (api.py): True it renders, False CHART-IMG refuses
# the key for it too, None no verdict (no time, no unit, another answer).
KeyCheck = Callable[[str], bool | None]


def _stored(reason: str) -> str:
    """A reason as a usage document may hold it: a usage document is an exit (known_keys)."""
    return known_keys.redaction().text(reason)


class KeyVerdicts:
    """The verdicts on keys; `_views`, `_store` and `_clock` are the limiter's."""

    _views: AccountViews
    _store: UsageStore
    _clock: Clock

    def mark_exhausted(self, account_id: str, answer: Answer) -> None:
        """After CHART-IMG's quota answer: out until the next UTC midnight (store + cache)."""
        self._views.provider_exhausted(account_id, self._clock.now())
        self._persist_exhausted(account_id, quota_reason(answer))

    def rate_limited(
        self, account_id: str, answer: Answer, retry_after: float | None, *, probe: bool = False
    ) -> RateVerdict:
        """After any other 429: the key cools down (Retry-After, else escalating). Set aside
        for 15 minutes, then probed (core/chart_img/set_aside.py), when the streak rule finds it the
        key's own problem (429s for over a minute while our count says it has quota and other
        keys served), or when the 429 answered its probe: one ERROR naming the account, the
        rule, until when and the answers seen (never the key), persisted with its reason.
        Every usable key hearing 429 at once (`throttled`) sets nothing aside."""
        verdict = self._views.rate_limited(account_id, answer, retry_after, probe=probe)
        view, streak = self._views[account_id], verdict.set_aside
        if streak is not None:
            reason = streak.reason(view.usage_today, view.daily_limit)
            self._set_aside(
                account_id,
                reason,
                answers=streak.as_log(),
                answered429=streak.seen,
                cooldowns=streak.cooldowns,
                spanSeconds=round(streak.span_seconds, 1),
            )
        elif probe:
            reason = f"429 streak: the probe after the key's set-aside was answered {answer.describe()}"
            self._set_aside(
                account_id, reason, answers=[{"httpStatus": answer.status, "message": answer.message}]
            )
        return verdict

    def _set_aside(self, account_id: str, reason: str, **said: Any) -> None:
        view, now = self._views[account_id], self._clock.now()
        until = rfc3339_utc(view.set_aside_until or now)
        get_logger().error(
            "chart-img key keeps answering 429: set aside, then probed",
            accountId=account_id,
            error={"code": "CHART_API_LIMIT_EXCEEDED"},
            rule="429 streak",
            setAsideUntil=until,
            usedToday=view.usage_today,
            dailyLimit=view.daily_limit,
            **said,
        )
        stored = _stored(reason)
        self._best_effort(
            lambda: self._store.mark_cooling(account_id, reason=stored, now=now),
            "chart-img account set-aside not persisted",
            account_id,
        )

    def key_refused(
        self, account_id: str, answer: Answer, *, probe: bool = False, check: KeyCheck | None = None
    ) -> bool:
        """After CHART-IMG refused the key (401, 403 "Forbidden"): True when the key is
        disabled (for 15 minutes, then probed: core/chart_img/set_aside.py): refused for another
        request too with no success between AND refused for a known-good chart as well
        (`check`; without one, the two refusals suffice), or its probe refused (then one ERROR
        line, and no instance uses it meanwhile), or already. False: the call only moves on;
        a key whose known-good chart renders (or cannot be tried) stays in service: the
        requests were what CHART-IMG refused, not the key."""
        disabled, refusals = self._views.refused(account_id, answer, probe=probe)
        if not refusals:
            return disabled
        rule = "key refused on its probe" if probe else "key refused for two requests"
        if check is not None and not probe:
            works = check(account_id)
            if works is not False:
                self._views.reinstated(account_id)
                get_logger().warning(
                    "chart-img key refused for two requests but not for a known-good chart: kept",
                    accountId=account_id,
                    knownGoodChart="rendered" if works else "no verdict",
                    answers=[{"httpStatus": a.status, "message": a.message} for a in refusals],
                )
                return False
            rule = "key refused for two requests, then for a known-good chart"
        until = self._views[account_id].disabled_until or self._clock.now()
        get_logger().error(
            "chart-img account key refused: account disabled",
            accountId=account_id,
            error={"code": "CHART_API_KEY_REFUSED"},
            rule=rule,
            disabledUntil=rfc3339_utc(until),
            answers=[{"httpStatus": a.status, "message": a.message} for a in refusals],
        )
        reason = _stored(refused_reason(refusals))
        self._best_effort(
            lambda: self._store.mark_disabled(account_id, reason=reason, now=self._clock.now()),
            "chart-img account disabling not persisted",
            account_id,
        )
        return True

    def succeeded(self, account_id: str, *, probe: bool = False) -> None:
        """The key answered 200: its 429 streak and refusals are over. A probe answered 200
        (or any 200 while the key was set aside here): the key serves again, for every
        instance (persisted, best effort)."""
        held = self._views.succeeded(account_id)
        if not (probe or held):
            return
        get_logger().info("chart-img key serves again: its probe answered 200", accountId=account_id)
        self._best_effort(
            lambda: self._store.mark_serving(account_id, now=self._clock.now()),
            "chart-img account serving again not persisted",
            account_id,
        )

    def _persist_exhausted(self, account_id: str, reason: str) -> None:
        reason = _stored(reason)
        self._best_effort(
            lambda: self._store.mark_exhausted(account_id, now=self._clock.now(), reason=reason),
            "chart-img account exhaustion not persisted",
            account_id,
        )

    @staticmethod
    def _best_effort(write: Callable[[], None], failed: str, account_id: str) -> None:
        try:
            write()
        except Exception as exc:  # best effort (§14.4): this process already stays off it
            get_logger().warning(failed, accountId=account_id, errorKind=type(exc).__name__)
