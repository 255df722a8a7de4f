"""adapters/chart_img/key_verdicts.py through the limiter: what each verdict logs (which rule, until
when, the answers), what it asks the store to persist, and what it says when the store cannot
take it. A FakeClock and an in-memory usage store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr

from harness.chart_img_server import FakeClock, new_key
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.chart_img.limiter import AccountLimiter, PacingMargins
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.plans import AccountLimits
from worker_chart_export.testing import InMemoryUsageStore

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
SET_ASIDE_ERROR = "chart-img key keeps answering 429: set aside, then probed"
TOO_MANY = Answer(429, "Too Many Requests")


class Recorded(InMemoryUsageStore):
    """Records what the verdicts ask the store to persist, with every argument."""

    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.marks: list[tuple[str, str, dict[str, Any]]] = []
        self.failing = failing

    def _mark(self, kind: str, account_id: str, kwargs: dict[str, Any]) -> None:
        self.marks.append((kind, account_id, kwargs))
        if self.failing:
            raise OSError("store down")

    def mark_cooling(self, account_id: str, **kwargs: Any) -> None:
        self._mark("cooling", account_id, kwargs)
        super().mark_cooling(account_id, **kwargs)

    def mark_serving(self, account_id: str, **kwargs: Any) -> None:
        self._mark("serving", account_id, kwargs)
        super().mark_serving(account_id, **kwargs)

    def mark_disabled(self, account_id: str, **kwargs: Any) -> None:
        self._mark("disabled", account_id, kwargs)
        super().mark_disabled(account_id, **kwargs)


def limiter(store: InMemoryUsageStore, clock: FakeClock, *ids: str) -> AccountLimiter:
    configs = [AccountConfig(id=i, apiKey=SecretStr(new_key())) for i in ids]
    return AccountLimiter(
        configs,
        store,
        defaults=AccountLimits(44, 100.0, 100),
        clock=clock,
        margins=PacingMargins(headroom=1.0, arrival_jitter=0.0),
    )


def test_the_streaks_error_line_and_reason_say_the_rule_the_span_and_our_count(
    log_capture: LogCapture,
) -> None:
    clock = FakeClock(NOON)
    store = Recorded()
    chosen = limiter(store, clock, "a", "b")
    for _ in range(7):  # at 0, 1, 3, 7, 15, 31, 61 s (+ a little): b serves between
        last = clock.now()
        verdict = chosen.rate_limited("a", TOO_MANY, None)
        clock.advance(0.004)
        chosen.succeeded("b")
        clock.advance(verdict.cooling + 0.0173)
    (event,) = log_capture.events(SET_ASIDE_ERROR)
    assert (event["answered429"], event["spanSeconds"], event["usedToday"], event["dailyLimit"]) == (
        7,
        61.1,
        0,
        44,
    )
    [(kind, account_id, kwargs)] = [m for m in store.marks if m[0] == "cooling"]
    assert (kind, account_id, kwargs["now"]) == ("cooling", "a", last)
    assert kwargs["reason"].startswith(
        "429 streak: CHART-IMG answered 429 through 7 cooldowns over 61 s with 0 of 44 "
    )


def test_a_probe_answered_429_is_set_aside_again_with_its_answer(log_capture: LogCapture) -> None:
    clock = FakeClock(NOON)
    store = Recorded()
    chosen = limiter(store, clock, "a")
    verdict = chosen.rate_limited("a", Answer(429, "Slow down"), 3.0, probe=True)
    assert verdict.cooling == 0.0  # set aside: no cooldown to wait for
    (event,) = log_capture.events(SET_ASIDE_ERROR)
    assert (event["accountId"], event["rule"], event["setAsideUntil"]) == (
        "a",
        "429 streak",
        "2025-03-10T12:15:00.000Z",
    )
    assert event["answers"] == [{"httpStatus": 429, "message": "Slow down"}]
    assert store.marks == [
        (
            "cooling",
            "a",
            {
                "reason": '429 streak: the probe after the key\'s set-aside was answered 429 "Slow down"',
                "now": NOON,
            },
        )
    ]


def test_a_refused_probe_disables_the_key_again_naming_that_rule(log_capture: LogCapture) -> None:
    clock = FakeClock(NOON)
    store = Recorded()
    chosen = limiter(store, clock, "a")
    assert chosen.key_refused("a", Answer(401, "Invalid Request", request="x"), probe=True) is True
    (event,) = log_capture.events("chart-img account key refused: account disabled")
    assert (event["rule"], event["disabledUntil"]) == ("key refused on its probe", "2025-03-10T12:15:00.000Z")
    assert [m[0] for m in store.marks] == ["disabled"]
    assert store.marks[0][2]["reason"] == 'CHART-IMG refused the key 401 "Invalid Request"'


def test_only_a_probe_or_a_key_held_aside_writes_serving_again(log_capture: LogCapture) -> None:
    clock = FakeClock(NOON)
    store = Recorded()
    chosen = limiter(store, clock, "a")
    chosen.succeeded("a")  # an ordinary 200: no write
    assert (
        store.marks == [] and log_capture.events("chart-img key serves again: its probe answered 200") == []
    )
    chosen.succeeded("a", probe=True)
    assert store.marks == [("serving", "a", {"now": NOON})]


def test_set_aside_and_serving_again_the_store_cannot_take_are_warnings(log_capture: LogCapture) -> None:
    clock = FakeClock(NOON)
    chosen = limiter(Recorded(failing=True), clock, "a")
    chosen.rate_limited("a", TOO_MANY, None, probe=True)
    chosen.succeeded("a", probe=True)
    (set_aside,) = log_capture.events("chart-img account set-aside not persisted")
    (serving,) = log_capture.events("chart-img account serving again not persisted")
    for event in (set_aside, serving):
        assert (event["severity"], event["accountId"], event["errorKind"]) == ("WARNING", "a", "OSError")
    clock.advance(1.0)  # the probe's 429 cooldown
    assert chosen.still_accepted("a")  # the 200 ended the set-aside in this process all the same
