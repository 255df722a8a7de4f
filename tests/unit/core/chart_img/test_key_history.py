"""core/chart_img/key_history.py: the escalating cooldown, the "keeps answering 429" rule and the
"refused again" rule, as pure functions of one key's history."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_chart_export.core.chart_img.key_history import (
    DEFAULT_POLICY,
    Answer,
    KeyHistory,
    KeyPolicy,
    StreakEvidence,
    after_rate_limit,
    after_refusal,
    after_success,
    quota_reason,
    refused_reason,
)

DAY = "2025-03-10T00:00:00Z"
TOO_MANY = Answer(429, "Too Many Requests")


def rate_limited(
    history: KeyHistory,
    at: float,
    *,
    retry_after: float | None = None,
    has_quota: bool = True,
    others_served: bool = True,
) -> tuple[KeyHistory, float, bool]:
    """A 429 at `at`; `others_served`: another key succeeded just before it (else none did)."""
    answer = Answer(429, "Too Many Requests", retry_after=retry_after)
    others = at - 0.001 if others_served else None
    history, verdict = after_rate_limit(
        history, answer, at=at, day=DAY, evidence=StreakEvidence(has_quota, served_at=others)
    )
    return history, verdict.cooling, verdict.set_aside is not None


def test_the_backoff_doubles_from_one_second_and_stops_at_its_cap() -> None:
    assert [DEFAULT_POLICY.cooldown(None, n) for n in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert DEFAULT_POLICY.cooldown(None, 10_000) == 30  # no overflow however long the streak


def test_retry_after_wins_within_its_bound() -> None:
    assert DEFAULT_POLICY.cooldown(7.5, 3) == 7.5
    assert DEFAULT_POLICY.cooldown(86_400, 0) == 600  # a misread date parks no key for the day
    assert DEFAULT_POLICY.cooldown(0, 2) == 4  # "now" is no cooldown: the backoff's


def test_a_streak_over_a_minute_while_other_keys_serve_sets_the_key_aside_on_the_answer_that_crosses_it() -> (
    None
):
    history, at, seen = KeyHistory(), 0.0, []
    for _ in range(7):
        history, cooling, exhausted = rate_limited(history, at)
        seen.append((at, cooling, exhausted))
        at += cooling
    assert seen == [
        (0.0, 1.0, False),
        (1.0, 2.0, False),
        (3.0, 4.0, False),
        (7.0, 8.0, False),
        (15.0, 16.0, False),
        (31.0, 30.0, False),
        (61.0, 0.0, True),
    ]
    assert history == KeyHistory(day=DAY)  # a fresh start after the verdict


def test_no_exhaustion_while_our_count_says_the_quota_is_gone_anyway() -> None:
    history, at = KeyHistory(), 0.0
    for _ in range(10):
        history, cooling, exhausted = rate_limited(history, at, has_quota=False)
        assert not exhausted
        at += cooling


def test_few_cooldowns_never_exhaust_however_long_apart() -> None:
    history = KeyHistory()
    for at in (0.0, 100.0, 200.0, 300.0):  # four cooldowns over 300 s: not "several"
        history, _, exhausted = rate_limited(history, at)
        assert not exhausted
    _, _, exhausted = rate_limited(history, 400.0)  # the fifth, 400 s after the first
    assert exhausted


def test_answers_during_a_cooldown_begin_none_and_do_not_escalate() -> None:
    history, cooling, _ = rate_limited(KeyHistory(), 0.0)
    for at in (0.1, 0.2, 0.5):
        history, left, exhausted = rate_limited(history, at)
        assert (left, exhausted) == (pytest.approx(cooling - at), False)
    assert (history.cooldowns, history.seen) == (1, 4)
    _, cooling, _ = rate_limited(history, 1.0)
    assert cooling == 2.0


def test_a_success_ends_the_streak_but_not_the_cooldown_running() -> None:
    history, _, _ = rate_limited(KeyHistory(), 0.0)
    history, _, _ = rate_limited(history, 1.0)  # cools until 3.0
    history, _ = after_refusal(history, Answer(401), day=DAY)
    fresh = after_success(history)
    assert (fresh.cooldowns, fresh.seen, fresh.refusals, fresh.cool_until) == (0, 0, (), 3.0)
    _, cooling, _ = rate_limited(fresh, 3.0)
    assert cooling == 1.0
    assert after_success(fresh) is fresh  # nothing to forget: the same history


def test_a_new_utc_day_starts_afresh() -> None:
    history, _, _ = rate_limited(KeyHistory(), 0.0)
    history, verdict = after_rate_limit(history, TOO_MANY, at=1.0, day="2025-03-11T00:00:00Z")
    assert (history.cooldowns, verdict.cooling) == (1, 1.0)


def test_a_key_is_disabled_when_refused_again_with_no_success_between() -> None:
    first, second = Answer(401, "Invalid Request"), Answer(403, "Forbidden")
    history, disabling = after_refusal(KeyHistory(), first, day=DAY)
    assert disabling == ()
    history, disabling = after_refusal(history, second, day=DAY)
    assert disabling == (first, second) and history.refusals == ()
    history, _ = after_refusal(after_success(after_refusal(KeyHistory(), first, day=DAY)[0]), first, day=DAY)
    assert history.refusals == (first,)  # the success in between: only one in a row


def test_only_refusals_of_different_requests_add_up() -> None:
    """One request refused again (a retry, the same body in another step) counts once: the
    request may be what is refused. Two different requests refused: the key is disabled."""
    first = Answer(401, "Invalid Request", request="a")
    history, disabling = after_refusal(KeyHistory(), first, day=DAY)
    again = Answer(401, "Invalid Request", request="a")
    history, disabling = after_refusal(history, again, day=DAY)
    assert disabling == () and len(history.refusals) == 1 and history.refusals[0].request == "a"
    other = Answer(403, "Forbidden", request="b")
    history, disabling = after_refusal(history, other, day=DAY)
    assert disabling == (again, other) and history.refusals == ()
    unknown = Answer(401)  # request not known: every refusal counts, as before
    history, _ = after_refusal(KeyHistory(), unknown, day=DAY)
    assert after_refusal(history, unknown, day=DAY)[1] == (unknown, unknown)


@given(
    answers=st.lists(st.tuples(st.floats(0, 5), st.booleans(), st.booleans()), max_size=60),
    policy=st.builds(KeyPolicy, streak_cooldowns=st.integers(2, 8), streak_span=st.floats(1, 120)),
)
def test_a_set_aside_needs_enough_cooldowns_over_the_span_and_other_keys_serving(
    answers: list[tuple[float, bool, bool]], policy: KeyPolicy
) -> None:
    """Whatever the timing, a streak sets its key aside only with `streak_cooldowns`
    cooldowns whose first and last are more than `streak_span` apart, and only when another
    key succeeded since the key's previous 429."""
    history, at = KeyHistory(), 0.0
    for gap, success, served in answers:
        at += gap
        if success:
            history = after_success(history)
            continue
        before = history
        others = at - gap / 2 if served else None  # another key succeeded since, or none did
        history, verdict = after_rate_limit(
            history, TOO_MANY, at=at, day=DAY, evidence=StreakEvidence(served_at=others), policy=policy
        )
        if verdict.set_aside is not None:
            assert before.first_at is not None and at - before.first_at > policy.streak_span
            assert verdict.set_aside.cooldowns >= policy.streak_cooldowns
            assert before.last_at is not None and others is not None and others > before.last_at


def test_reasons_name_the_answers_never_more() -> None:
    assert (
        quota_reason(Answer(429, "Limit Exceeded"))
        == 'CHART-IMG answered 429 "Limit Exceeded": the day\'s quota'
    )
    assert refused_reason((Answer(401, "Invalid Request"), Answer(401))) == (
        'CHART-IMG refused the key 401 "Invalid Request", then 401 without a message'
    )
    assert len(Answer(429, "x" * 500).message) == 80
    assert Answer(429, "too\n  many\trequests").message == "too many requests"


def test_a_retry_after_under_a_second_is_taken_as_given() -> None:
    assert DEFAULT_POLICY.cooldown(0.5, 0) == 0.5
    assert DEFAULT_POLICY.cooldown(0.0, 3) == 8.0  # none given: the backoff


def test_the_doubling_stops_at_two_to_the_32nd_however_long_the_streak() -> None:
    tiny = KeyPolicy(first_cooldown=1e-9, max_cooldown=1e9)
    assert tiny.cooldown(None, 40) == tiny.cooldown(None, 32) == pytest.approx(1e-9 * 2.0**32)


def test_an_answer_during_a_cooldown_is_kept_among_the_answers_seen() -> None:
    history, _ = after_rate_limit(KeyHistory(), TOO_MANY, at=0.0, day=DAY)
    history, _ = after_rate_limit(history, Answer(429), at=0.5, day=DAY)
    assert history.answers == (TOO_MANY, Answer(429)) and history.seen == 2 and history.cooldowns == 1


def test_a_streak_says_how_many_429s_and_keeps_the_refusals() -> None:
    history, _ = after_refusal(KeyHistory(), Answer(401), day=DAY)
    at, verdict = 0.0, None
    for _ in range(10):
        history, verdict = after_rate_limit(
            history, TOO_MANY, at=at, day=DAY, evidence=StreakEvidence(served_at=at - 0.001)
        )
        if verdict.set_aside is not None:
            break
        at = history.cool_until
    assert verdict is not None and verdict.set_aside is not None
    assert verdict.set_aside.seen == verdict.set_aside.cooldowns == 7
    assert history.refusals == (Answer(401),)  # one refusal more disables the key, streak or not


def test_a_streaks_reason_lists_each_answer_and_how_often() -> None:
    history, _ = after_rate_limit(KeyHistory(), TOO_MANY, at=0.0, day=DAY)
    history, _ = after_rate_limit(history, Answer(429), at=0.5, day=DAY)
    at, verdict = 1.0, None
    for _ in range(10):
        history, verdict = after_rate_limit(
            history, TOO_MANY, at=at, day=DAY, evidence=StreakEvidence(served_at=at - 0.001)
        )
        if verdict.set_aside is not None:
            break
        at = history.cool_until
    assert verdict is not None and verdict.set_aside is not None
    reason = verdict.set_aside.reason(10, 44)
    assert reason.endswith(
        'with 10 of 44 used by our count, while other keys served: 429 "Too Many Requests" x7, '
        "429 without a message x1"
    )
    assert reason.startswith("429 streak: CHART-IMG answered 429 through 7 cooldowns over ")


def test_no_key_is_set_aside_while_no_other_key_serves() -> None:
    """Every key hearing 429 (CHART-IMG throttling), or the only key: nobody is to blame."""
    history, at = KeyHistory(), 0.0
    for _ in range(20):  # eight minutes of escalating cooldowns
        history, cooling, set_aside = rate_limited(history, at, others_served=False)
        assert not set_aside and cooling > 0
        at += cooling
    assert history.cooldowns == 20 and at > 450
    _, _, set_aside = rate_limited(history, at)  # another key served since: now it is this key's
    assert set_aside


def test_a_success_of_another_key_before_the_previous_429_is_not_enough() -> None:
    """Other keys served earlier in the streak, then every key heard 429: throttling, no blame."""
    history, at = KeyHistory(), 0.0
    for _ in range(6):
        history, cooling, _ = rate_limited(history, at)
        at += cooling
    stale = history.last_at
    assert stale is not None
    answer = Answer(429, "Too Many Requests")
    _, verdict = after_rate_limit(
        history, answer, at=at, day=DAY, evidence=StreakEvidence(served_at=stale - 1)
    )
    assert verdict.set_aside is None and verdict.cooling == 30.0


def test_a_success_keeps_the_day_it_describes() -> None:
    history = KeyHistory(day=DAY, cooldowns=3, cool_until=9.0, seen=3)
    assert after_success(history) == KeyHistory(day=DAY, cool_until=9.0)


def test_a_streak_of_exactly_the_span_does_not_exhaust() -> None:
    """More than streak_span seconds (60) between the first and the last 429: 60 is not more."""
    history, exhausted = KeyHistory(), False
    for at in (0.0, 12.0, 24.0, 36.0, 48.0, 60.0):  # six cooldowns, Retry-After: 12
        history, _, exhausted = rate_limited(history, at, retry_after=12.0)
    assert history.cooldowns == 6 and not exhausted
    _, _, exhausted = rate_limited(history, 72.0, retry_after=12.0)
    assert exhausted


def test_two_429s_that_say_the_same_are_one_answer_whatever_wait_each_asked_for() -> None:
    assert Answer(429, "Too Many Requests", retry_after=5.0) == TOO_MANY
    history, verdict = after_rate_limit(
        KeyHistory(), Answer(429, "Too Many Requests", retry_after=5.0), at=0.0, day=DAY
    )
    assert verdict.cooling == 5.0 and history.answers == (TOO_MANY,)


def test_a_429_during_a_cooldown_is_the_streaks_latest_and_a_success_at_that_moment_is_not_since() -> None:
    history, _ = after_rate_limit(KeyHistory(), TOO_MANY, at=0.0, day=DAY)
    history, _ = after_rate_limit(history, TOO_MANY, at=0.5, day=DAY)  # during its cooldown
    assert history.last_at == 0.5 and history.cooldowns == 1
    history, at = KeyHistory(), 0.0
    for _ in range(6):
        history, cooling, _ = rate_limited(history, at)
        at += cooling
    previous = history.last_at
    _, verdict = after_rate_limit(
        history, TOO_MANY, at=at, day=DAY, evidence=StreakEvidence(served_at=previous)
    )
    assert verdict.set_aside is None  # a success at the previous 429's very moment is not since it


def test_two_throttles_one_after_another_set_no_key_aside() -> None:
    """The chaos benchmark's full seed 1: two CHART-IMG-wide throttles 28 s apart. Other keys
    served in the calm between them, so "others served since this key's previous 429" held,
    and three BASIC keys were set aside for 15 minutes. The others heard 429 too in that
    time: nobody's key is at fault, none is set aside."""
    history, verdict = KeyHistory(), None
    at = 0.0
    for n in range(8):  # eight cooldowns over 99 s, each 429 with the others hearing one too
        at = n * 14.0
        others = StreakEvidence(served_at=at - 5.0, limited_at=at - 1.0)
        history, verdict = after_rate_limit(history, TOO_MANY, at=at, day=DAY, evidence=others)
        assert verdict.set_aside is None, n
    later = history.cool_until + 1.0  # past its cooldown: a 429 of its own
    others_fine = StreakEvidence(served_at=later - 5.0, limited_at=at - 1.0)  # they served, without 429
    _, verdict = after_rate_limit(history, TOO_MANY, at=later, day=DAY, evidence=others_fine)
    assert verdict.set_aside is not None  # once the others serve without 429, it is this key's
