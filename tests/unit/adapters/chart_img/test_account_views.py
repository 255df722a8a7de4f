"""adapters/chart_img/account_views.py: this process's view of the accounts, the rules the limiter
chooses by: the pacing margins, the expected wait of a pick, what a reservation or a read of
the usage documents teaches, and what CHART-IMG's answers do to an account, each at its
boundary (a moment exactly `now`, a count exactly at the limit, a new UTC day)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import FakeClock, new_key
from worker_chart_export.adapters.chart_img.account_view import PacingMargins
from worker_chart_export.adapters.chart_img.account_views import AccountViews
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.plans import AccountLimits
from worker_chart_export.core.chart_img.usage import Pacing
from worker_chart_export.core.types import Reservation, ReservationRefusal

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
TODAY = "2025-03-10T00:00:00Z"
MIDNIGHT = datetime(2025, 3, 11, tzinfo=UTC)
BASIC = AccountLimits(44, 1.0, 3)  # the BASIC plan: 44 a day, 1/s, burst 3
EXACT = PacingMargins(headroom=1.0, arrival_jitter=0.0)
TOO_MANY = Answer(429, "Too Many Requests")
FORBIDDEN = Answer(403, "Forbidden")


def views(
    *ids: str, clock: FakeClock, limits: AccountLimits = BASIC, margins: PacingMargins | None = EXACT
) -> AccountViews:
    configs = [AccountConfig(id=i, apiKey=SecretStr(new_key())) for i in ids]
    return AccountViews(configs, defaults=limits, clock=clock, margins=margins)


def usage(used: int, **extra: Any) -> dict[str, Any]:
    return {"usageToday": used, "windowStart": TODAY, **extra}


# --- the pacing margins ------------------------------------------------------------------------


def test_by_default_an_account_is_paced_at_90_percent_of_its_plans_rate_less_the_jitter() -> None:
    """docs/design.md: we pace at 90% of the plan's rate, the burst banked 0.3 s less."""
    assert PacingMargins().pacing(BASIC) == Pacing(0.9, 3, 0.3)
    built = views("a", clock=FakeClock(NOON), margins=None)["a"].pacing
    assert built.rate_per_second == pytest.approx(0.9 * BASIC.rate_per_second)
    assert built.interval > 1.0 / BASIC.rate_per_second  # a headroom of 1.0 would pace at the limit
    assert built.arrival_jitter == 0.3


# --- the expected wait of a pick ---------------------------------------------------------------


def test_the_expected_wait_counts_the_last_seen_slot_each_pick_in_flight_and_the_cooldown() -> None:
    clock = FakeClock(NOON)
    view = views("a", clock=clock, limits=AccountLimits(44, 1.0, 1))["a"]
    now, moment = clock.now().timestamp(), clock.monotonic()
    assert view.expected_wait(now, moment) == 0.0  # nothing known: a slot now
    view.tat = now + 2.0
    assert view.expected_wait(now, moment) == pytest.approx(2.0)
    view.in_flight = 2  # two picks still reserving: two slots more
    assert view.expected_wait(now, moment) == pytest.approx(4.0)
    view.tat, view.in_flight = None, 1
    assert view.expected_wait(now, moment) == pytest.approx(1.0)
    view.history = view.history.__class__(cool_until=moment + 7.0)
    assert view.expected_wait(now, moment) == pytest.approx(7.0)  # the cooldown is longer


def test_a_pick_counts_in_flight_until_released() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    assert accounts.pick((), ()) == "a"
    assert accounts["a"].in_flight == 1
    accounts.release("a")
    assert accounts["a"].in_flight == 0
    assert accounts.pick((), ()) == "a"  # released: a is as free as before


# --- boundaries of the moments -----------------------------------------------------------------


def test_an_exhaustion_ending_exactly_now_is_over() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts["a"].exhausted_until = NOON
    accounts["a"].provider_exhausted_until = NOON
    assert accounts["a"].usable(NOON)
    assert accounts.exhausted_accounts() == ()
    assert accounts.still_accepted("a")
    accounts["a"].exhausted_until = accounts["a"].provider_exhausted_until = NOON + timedelta(seconds=1)
    assert not accounts["a"].usable(NOON)
    assert accounts.exhausted_accounts() == ("a",)
    assert not accounts.still_accepted("a")


def test_a_cooldown_ending_exactly_now_no_longer_refuses() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts.rate_limited("a", TOO_MANY, retry_after=5.0)
    assert not accounts.still_accepted("a")
    clock.advance(5.0)
    assert accounts.still_accepted("a")


def test_a_disabled_key_is_no_longer_accepted() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts.refused("a", FORBIDDEN)
    assert accounts.still_accepted("a")  # once: only moved on
    accounts.refused("a", FORBIDDEN)
    assert not accounts.still_accepted("a")


def test_no_accounts_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"^AccountLimiter needs at least one account$"):
        AccountViews([], defaults=BASIC, clock=FakeClock(NOON))


# --- what a reservation teaches ----------------------------------------------------------------


def test_an_exhausted_reservation_is_cached_a_minute_by_default_and_never_past_midnight() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    refused = Reservation("a", False, 44, 44, refusal=ReservationRefusal.EXHAUSTED)
    accounts.learn("a", refused, units=0)
    assert accounts["a"].exhausted_until == NOON + timedelta(seconds=60)
    late = FakeClock(MIDNIGHT - timedelta(seconds=10))
    at_night = views("a", clock=late)
    at_night.learn("a", refused, units=0)
    assert at_night["a"].exhausted_until == MIDNIGHT


# --- catching up with the other instances ------------------------------------------------------


def test_the_view_is_behind_only_once_told_and_then_reads_only_the_usable_accounts() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "out", "off", clock=clock)
    assert accounts.catch_up_ids() is None  # nothing seen of anyone else yet
    accounts.learn("out", Reservation("out", False, 44, 44, refusal=ReservationRefusal.EXHAUSTED), units=0)
    accounts.learn("off", Reservation("off", False, 0, 44, refusal=ReservationRefusal.DISABLED), units=0)
    accounts.fell_behind()
    assert accounts.catch_up_ids() == ["a"]
    assert accounts.catch_up_ids() is None  # read once: no longer behind


def test_catching_up_moves_the_pacing_state_only_forward() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", "c", clock=clock)
    accounts["a"].tat = accounts["b"].tat = 100.0
    accounts.caught_up({"a": usage(1, tat=150.0), "b": usage(1, tat=50.0), "c": usage(1, tat=70.0)})
    assert [accounts[i].tat for i in "abc"] == [150.0, 100.0, 70.0]
    accounts.caught_up({"a": usage(2)})  # a document without `tat` forgets nothing
    assert accounts["a"].tat == 150.0 and accounts["a"].usage_today == 2


def test_catching_up_exhausts_an_account_whose_document_is_at_its_limit() -> None:
    clock = FakeClock(NOON)
    accounts = views("at", "under", "override", clock=clock)
    accounts.caught_up({"at": usage(44), "under": usage(43), "override": usage(10, dailyLimit=10)})
    assert accounts["at"].exhausted_until == NOON + timedelta(seconds=60)  # the cache's minute
    assert accounts["under"].exhausted_until is None
    assert accounts["override"].exhausted_until == NOON + timedelta(seconds=60)  # the document's limit
    assert accounts.exhausted_accounts() == ("at", "override")
    late = FakeClock(MIDNIGHT - timedelta(seconds=10))
    at_night = views("at", clock=late)
    at_night.caught_up({"at": {"usageToday": 44, "windowStart": TODAY}})
    assert at_night["at"].exhausted_until == MIDNIGHT


def test_catching_up_disables_a_key_disabled_today_until_midnight() -> None:
    clock = FakeClock(NOON)
    accounts = views("today", "yesterday", clock=clock)
    accounts.caught_up(
        {
            "today": usage(3, disabled=True),
            "yesterday": {"usageToday": 3, "windowStart": "2025-03-09T00:00:00Z", "disabled": True},
        }
    )
    assert accounts["today"].disabled_until == MIDNIGHT
    assert accounts["yesterday"].disabled_until is None
    assert accounts.usable_accounts() == ("yesterday",)


# --- what CHART-IMG said -----------------------------------------------------------------------


def rate_limit_streak(
    accounts: AccountViews, clock: FakeClock, account_id: str = "a", *, serving: str | None = None
) -> Any:
    """429s, each after the last cooldown ended, for over two minutes: five cooldowns and
    more, over a minute apart, while `serving` (another key) succeeds between them; the
    last verdict."""
    verdict = accounts.rate_limited(account_id, TOO_MANY, retry_after=None)
    for _ in range(8):
        if verdict.set_aside is not None:
            break
        clock.advance(verdict.cooling + 1.0)
        if serving is not None:
            accounts.succeeded(serving)
            clock.advance(0.5)
        verdict = accounts.rate_limited(account_id, TOO_MANY, retry_after=None)
    return verdict


def test_the_429_streak_sets_a_key_aside_only_while_our_count_says_it_has_quota() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    accounts["a"].usage_today = 43  # one left
    assert rate_limit_streak(accounts, clock, "a", serving="b").set_aside is not None
    assert accounts["a"].set_aside_until == clock.now() + timedelta(minutes=15)
    assert not accounts["a"].usable(clock.now()) and accounts.exhausted_accounts() == ()
    clock = FakeClock(NOON)
    accounts = views("full", "b", clock=clock)
    accounts["full"].usage_today = 44  # none left by our count: nothing to learn from its 429s
    assert rate_limit_streak(accounts, clock, "full", serving="b").set_aside is None


def test_the_429_streak_sets_nothing_aside_while_no_other_key_serves() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    assert rate_limit_streak(accounts, clock, "a").set_aside is None  # b never succeeded
    assert accounts["a"].usable(clock.now())


def test_every_usable_key_hearing_429_is_chart_img_throttling() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    assert not accounts.rate_limited("a", TOO_MANY, retry_after=None).throttled  # b has not
    assert accounts.rate_limited("b", TOO_MANY, retry_after=None).throttled  # both now
    accounts.succeeded("a")
    assert not accounts.rate_limited("b", TOO_MANY, retry_after=None).throttled


def test_a_429_on_a_probe_sets_the_key_aside_again_and_a_200_brings_it_back() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    verdict = accounts.rate_limited("a", TOO_MANY, retry_after=None, probe=True)
    assert verdict.cooling == 0.0 and accounts["a"].set_aside_until == NOON + timedelta(minutes=15)
    accounts.succeeded("a")
    assert accounts["a"].set_aside_until is None and accounts["a"].usable(NOON)


def test_a_new_utc_day_starts_the_429_escalation_afresh() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=20))
    accounts = views("a", clock=clock)
    first = accounts.rate_limited("a", TOO_MANY, retry_after=None)
    clock.advance(first.cooling)
    second = accounts.rate_limited("a", TOO_MANY, retry_after=None)
    assert (first.cooling, second.cooling) == (1.0, 2.0)
    clock.advance(30)  # past midnight
    assert accounts.rate_limited("a", TOO_MANY, retry_after=None).cooling == 1.0


def test_a_key_refused_twice_is_disabled_and_later_answers_say_so_without_deciding_again() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    assert accounts.refused("a", FORBIDDEN) == (False, ())
    assert accounts.refused("a", Answer(401)) == (True, (FORBIDDEN, Answer(401)))
    assert accounts["a"].disabled_until == NOON + timedelta(minutes=15)  # then a probe, not midnight
    assert accounts.refused("a", FORBIDDEN) == (True, ())  # an answer to a call sent before
    clock.advance(15 * 60)
    assert accounts.refused("a", FORBIDDEN, probe=True) == (True, (FORBIDDEN,))  # its probe refused
    assert accounts["a"].disabled_until == clock.now() + timedelta(minutes=15)


def test_refusals_on_two_utc_days_do_not_add_up() -> None:
    clock = FakeClock(MIDNIGHT - timedelta(seconds=5))
    accounts = views("a", clock=clock)
    assert accounts.refused("a", FORBIDDEN) == (False, ())
    clock.advance(10)
    assert accounts.refused("a", FORBIDDEN) == (False, ())


# --- set aside, then probed; each account's plan ----------------------------------------------

PLANNED = [
    AccountConfig(id="basic", apiKey=SecretStr(new_key()), plan="BASIC"),
    AccountConfig(id="pro", apiKey=SecretStr(new_key()), plan="PRO"),
]


def test_catching_up_holds_a_key_until_the_documents_own_moment() -> None:
    clock = FakeClock(NOON)
    accounts = views("disabled", "cooling", "free", clock=clock)
    until = "2025-03-10T12:10:00.000Z"
    accounts.caught_up(
        {
            "disabled": usage(3, disabled=True, disabledUntil=until),
            "cooling": usage(3, coolUntil=until, coolReason="429 streak: x"),
            "free": usage(3, coolUntil="2025-03-10T11:00:00.000Z", coolReason="over"),
        }
    )
    ten_past = NOON + timedelta(minutes=10)
    assert (accounts["disabled"].disabled_until, accounts["cooling"].set_aside_until) == (ten_past, ten_past)
    assert accounts["free"].set_aside_until is None and accounts["free"].disabled_until is None
    assert accounts.usable_accounts() == ("cooling", "free")  # set aside is not disabled
    assert accounts.pick((), ()) == "free"


def test_a_reservation_refused_as_set_aside_holds_the_key_a_minute() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts.learn("a", Reservation("a", False, 3, 44, refusal=ReservationRefusal.COOLING), units=0)
    assert accounts["a"].set_aside_until == NOON + timedelta(minutes=1) and accounts.pick((), ()) is None


def test_a_set_aside_ending_exactly_now_is_over() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts["a"].set_aside_until = NOON
    assert accounts["a"].usable(NOON) and accounts.still_accepted("a")
    assert accounts.succeeded("a") is False  # nothing held: a 200 writes nothing
    accounts["a"].set_aside_until = NOON + timedelta(seconds=1)
    assert not accounts["a"].usable(NOON) and not accounts.still_accepted("a")
    assert accounts.succeeded("a") is True and accounts["a"].usable(NOON)
    accounts.refused("a", FORBIDDEN, probe=True)  # disabled, not set aside: held too
    assert accounts.succeeded("a") is True


def test_a_unit_given_back_is_the_count_the_store_answered() -> None:
    from worker_chart_export.core.chart_img.usage import Refund

    clock = FakeClock(NOON)
    accounts = views("a", clock=clock)
    accounts["a"].usage_today = 7
    accounts.given_back("a", Refund("a", False, 9, 0, "no unit counted"))
    assert accounts["a"].usage_today == 7  # nothing given back: the view keeps its count
    accounts.given_back("a", Refund("a", True, 5, 2))
    assert accounts["a"].usage_today == 5


def test_throttling_counts_only_the_usable_keys() -> None:
    clock = FakeClock(NOON)
    accounts = views("a", "b", "gone", clock=clock)
    accounts.provider_exhausted("gone", NOON)  # out for the day: not heard, not counted
    assert not accounts.rate_limited("a", TOO_MANY, retry_after=None).throttled
    assert accounts.rate_limited("b", TOO_MANY, retry_after=None).throttled


def test_plans_filter_what_is_disabled_and_usable() -> None:
    clock = FakeClock(NOON)
    accounts = AccountViews(PLANNED, defaults=BASIC, clock=clock, margins=EXACT)
    accounts.refused("pro", FORBIDDEN, probe=True)
    assert accounts.all_disabled({"PRO"}) and not accounts.all_disabled({"BASIC", "PRO"})
    assert not accounts.all_disabled()
    assert accounts.usable_accounts({"PRO"}) == () and accounts.usable_accounts({"BASIC", "PRO"}) == (
        "basic",
    )
    assert accounts.exhausted_accounts({"PRO"}) == ()


def test_a_catch_up_read_sets_aside_a_key_chart_img_said_was_spent_though_our_count_is_not() -> None:
    """Another instance heard CHART-IMG's quota answer for a (its document says
    exhaustedUntil midnight) with only 3 of 44 units counted: the read sets a aside here too."""
    clock = FakeClock(NOON)
    accounts = views("a", "b", clock=clock)
    accounts.caught_up({"a": usage(3, exhaustedUntil="2025-03-11T00:00:00Z"), "b": usage(3)})
    assert accounts.exhausted_accounts() == ("a",)
    assert accounts.pick((), ()) == "b"
