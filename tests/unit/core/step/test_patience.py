"""core/step/patience.py: a bad window costs time, never the run. A step that fell short
waits (while attempts are left) when what failed for a bad moment could still make
minImages; it is FAILED at once when what failed for good leaves too few."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.step.patience import (
    Failed,
    StepAttempt,
    Succeeded,
    Waits,
    judge_charts,
    waiting_step_ids,
    waits_now,
    waits_of,
)

NOW = datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC)
POLICY = Backoff(attempts=5, base=60.0, cap=480.0)  # the default: 1 min doubling to 8, 5 attempts
THROTTLED = StepError(ErrorCode.CHART_API_LIMIT_EXCEEDED, "CHART-IMG throttling", retryable=True)
REFUSED = StepError(ErrorCode.CHART_API_FAILED, "HTTP 422: Invalid Symbol")  # the request's: for good
SPENT = StepError(ErrorCode.CHART_API_LIMIT_EXCEEDED, "every account is at its daily limit")


def judge(items: int, failures: list[StepError], *, attempt: int = 1, min_images: int = 3) -> object:
    return judge_charts(
        items, failures, min_images=min_images, requested=4, attempt=StepAttempt(attempt, POLICY, NOW)
    )


def test_enough_charts_succeed_whatever_failed() -> None:
    assert judge(3, [REFUSED]) == Succeeded()
    assert judge(4, []) == Succeeded()


@pytest.mark.parametrize(("attempt", "wait_minutes"), [(1, 1), (2, 2), (3, 4), (4, 8)])
def test_a_step_a_bad_window_held_back_waits_longer_each_attempt(attempt: int, wait_minutes: int) -> None:
    verdict = judge(1, [THROTTLED, THROTTLED, THROTTLED], attempt=attempt)
    assert isinstance(verdict, Waits)
    assert verdict.until == NOW + timedelta(minutes=wait_minutes)
    assert verdict.cause.code is ErrorCode.CHART_API_LIMIT_EXCEEDED
    assert verdict.cause.message == (
        "1 of 4 charts rendered, fewer than minImages=3 (3 CHART_API_LIMIT_EXCEEDED): CHART-IMG throttling"
    )


def test_one_refused_chart_and_one_bad_moment_still_wait_when_minimages_can_be_met() -> None:
    """4 templates, minImages 3: 2 rendered, 1 refused for good, 1 throttled: 3 are possible."""
    assert isinstance(judge(2, [REFUSED, THROTTLED]), Waits)


@pytest.mark.parametrize(
    "failures",
    [[REFUSED, REFUSED, REFUSED], [REFUSED, REFUSED, THROTTLED], [SPENT, SPENT, THROTTLED]],
    ids=["all-refused", "too-many-refused", "quota-really-spent"],
)
def test_what_failed_for_good_leaving_too_few_fails_at_once(failures: list[StepError]) -> None:
    verdict = judge(1, failures)
    assert isinstance(verdict, Failed)
    assert "attempts" not in verdict.error.details  # no wait, no history


def test_the_last_attempt_fails_naming_every_attempts_cause() -> None:
    earlier = [
        {
            "attempt": n,
            "at": f"2026-11-28T0{n}:00:00.000Z",
            "retryAt": f"2026-11-28T0{n}:01:00.000Z",
            "error": {"code": "CHART_API_FAILED", "message": f"outage {n}"},
        }
        for n in range(1, 5)
    ]
    verdict = judge_charts(
        1,
        [THROTTLED, THROTTLED, THROTTLED],
        min_images=3,
        requested=4,
        attempt=StepAttempt(5, POLICY, NOW, earlier),  # type: ignore[arg-type]
    )
    assert isinstance(verdict, Failed)
    assert verdict.error.message.endswith("; after 5 attempt(s), each held back by a bad moment")
    attempts = verdict.error.details["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3, 4, 5]
    assert attempts[-1]["error"]["code"] == "CHART_API_LIMIT_EXCEEDED"
    assert [a["error"]["message"] for a in attempts[:4]] == ["outage 1", "outage 2", "outage 3", "outage 4"]
    assert not verdict.error.retryable


def test_one_attempt_allowed_never_waits() -> None:
    verdict = judge_charts(
        0, [THROTTLED] * 4, min_images=1, requested=4, attempt=StepAttempt(1, POLICY.with_attempts(1), NOW)
    )
    assert isinstance(verdict, Failed)


def test_waits_recorded_on_a_step_are_read_back_and_others_left_out() -> None:
    good = {"attempt": 1, "at": "a", "retryAt": "b", "error": {"code": "GCS_WRITE_FAILED", "message": "503"}}
    step = {"waits": [good, "junk", {"attempt": "1"}, {**good, "error": "not a map"}, None]}
    assert waits_of(step) == [good]
    assert waits_of({"waits": "not a list"}) == [] and waits_of(None) == []


def test_a_waiting_step_is_running_with_its_retry_moment() -> None:
    waiting = {"stepType": "CHART_EXPORT", "status": "RUNNING", "retryAt": "2026-11-28T09:01:00.000Z"}
    assert waits_now(waiting)
    assert not waits_now({**waiting, "status": "READY"}) and not waits_now({"status": "RUNNING"})
    steps = {"b": waiting, "a": waiting, "c": {"status": "RUNNING"}, "d": "junk"}
    assert waiting_step_ids(steps) == ["a", "b"]
