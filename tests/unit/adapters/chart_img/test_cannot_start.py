"""The failure a chart request ends with when no attempt can be made (outcomes.cannot_start):
what the step's manifest and error say, each case against the last real answer or none."""

from __future__ import annotations

from worker_chart_export.adapters.chart_img.attempts import AttemptPass, cannot_start
from worker_chart_export.adapters.chart_img.http import HttpAnswer
from worker_chart_export.adapters.chart_img.limiter import NoAccount, NoAccountReason
from worker_chart_export.core.chart_img.answers import Disposition
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.types import ChartFailure, ChartSuccess

ANSWER = HttpAnswer(503, b'{"message": "upstream busy"}', "application/json")
LIMIT = HttpAnswer(429, b'{"message": "Limit Exceeded"}', "application/json")


def last_failure(code: ErrorCode = ErrorCode.CHART_API_FAILED, answer: HttpAnswer = ANSWER) -> AttemptPass:
    error = StepError(code, f"CHART-IMG answered {answer.status}", {"httpStatus": answer.status})
    return AttemptPass(Disposition.RETRY, ChartFailure(error), answer)


def error_of(outcome: AttemptPass) -> StepError:
    assert outcome.disposition is None  # nothing more can be tried
    assert isinstance(outcome.result, ChartFailure)
    return outcome.result.error


def never_asked() -> list[str]:
    raise AssertionError("the disabled accounts are asked for only when every key is refused")


def test_every_key_refused_before_any_call_says_no_request_was_sent() -> None:
    outcome = cannot_start(
        None,
        NoAccount(NoAccountReason.NO_USABLE_KEY, ()),
        remaining=9.0,
        disabled=lambda: ["acct-a", "acct-b"],
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_FAILED,
        "CHART-IMG refused the key of every configured account; no request was sent",
        {"errorKind": "bad_key", "disabledAccounts": ["acct-a", "acct-b"]},
    )
    assert outcome.answer is None


def test_every_key_refused_after_an_answer_keeps_that_answer_and_names_the_disabled_accounts() -> None:
    last = last_failure()
    outcome = cannot_start(
        last, NoAccount(NoAccountReason.NO_USABLE_KEY, ()), remaining=9.0, disabled=lambda: ["acct-a"]
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_FAILED,
        "CHART-IMG answered 503",
        {"httpStatus": 503, "disabledAccounts": ["acct-a"]},
    )
    assert outcome.answer is ANSWER  # record mode sees the answer the failure comes from


def test_every_account_exhausted_before_any_call() -> None:
    outcome = cannot_start(
        None, NoAccount(NoAccountReason.EXHAUSTED, ("b", "a")), remaining=9.0, disabled=never_asked
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        "every CHART-IMG account is at its daily limit; no request was sent",
        {"exhaustedAccounts": ["a", "b"]},
    )
    assert outcome.answer is None


def test_a_limit_answer_then_every_account_exhausted_keeps_that_answer() -> None:
    last = last_failure(ErrorCode.CHART_API_LIMIT_EXCEEDED, LIMIT)
    outcome = cannot_start(
        last, NoAccount(NoAccountReason.EXHAUSTED, ("a",)), remaining=9.0, disabled=never_asked
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        "CHART-IMG answered 429",
        {"httpStatus": 429, "exhaustedAccounts": ["a"]},
    )
    assert outcome.answer is LIMIT


def test_another_failure_then_every_account_exhausted_says_both() -> None:
    outcome = cannot_start(
        last_failure(), NoAccount(NoAccountReason.EXHAUSTED, ("a",)), remaining=9.0, disabled=never_asked
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        "every CHART-IMG account reached its daily limit before the request succeeded",
        {
            "exhaustedAccounts": ["a"],
            "lastError": {
                "code": "CHART_API_FAILED",
                "message": "CHART-IMG answered 503",
                "details": {"httpStatus": 503},
            },
        },
    )
    assert outcome.answer is None  # the failure is the limit's, not that answer's


def test_a_success_then_every_account_exhausted_has_no_last_error() -> None:
    last = AttemptPass(None, ChartSuccess(b"\x89PNG", "a"))
    outcome = cannot_start(
        last, NoAccount(NoAccountReason.EXHAUSTED, ("a",)), remaining=9.0, disabled=never_asked
    )
    assert error_of(outcome).details == {"exhaustedAccounts": ["a"], "lastError": {}}


def test_out_of_time_after_an_answer_keeps_that_answer_and_says_the_budget_stopped_it() -> None:
    outcome = cannot_start(last_failure(), None, remaining=0.25, disabled=never_asked)
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_FAILED, "CHART-IMG answered 503", {"httpStatus": 503, "stoppedBy": "budget"}
    )
    assert outcome.answer is ANSWER


def test_out_of_time_before_any_call_says_how_much_time_was_left() -> None:
    outcome = cannot_start(
        None, NoAccount(NoAccountReason.NO_TIME, ()), remaining=0.12345, disabled=never_asked
    )
    assert error_of(outcome) == StepError(
        ErrorCode.CHART_API_FAILED,
        "the step's time budget ran out before CHART-IMG could be called",
        {"errorKind": "budget", "remainingSeconds": 0.123},
    )
    assert outcome.answer is None


def test_no_account_free_now_names_each_accounts_reason_and_is_worth_waiting_for() -> None:
    """Issue 38: none can take the call now, not all of them for the day: each account said
    with its reason (exhausted, disabled, set aside, cooling), and the failure retryable."""
    refusal = NoAccount(
        NoAccountReason.SET_ASIDE,
        ("a",),
        standing=(("a", "at its daily limit until X"), ("b", "its key refused: disabled until Y")),
        other_plans=(("c", "BASIC"),),
    )
    outcome = cannot_start(None, refusal, remaining=9.0, disabled=never_asked)
    error = error_of(outcome)
    assert error.retryable and error.code is ErrorCode.CHART_API_LIMIT_EXCEEDED
    assert error.message == (
        "no CHART-IMG account that can serve this chart can take it now (a: at its daily limit until X; "
        "b: its key refused: disabled until Y); no request was sent; c (BASIC) cannot serve it: the "
        "template asks for more than their plan allows"
    )
    assert error.details == {
        "errorKind": "no_account_now",
        "accounts": [
            {"accountId": "a", "why": "at its daily limit until X"},
            {"accountId": "b", "why": "its key refused: disabled until Y"},
        ],
        "otherPlanAccounts": [{"accountId": "c", "plan": "BASIC"}],
    }


def test_every_account_of_the_plans_that_serve_a_chart_exhausted_says_the_others_cannot_serve_it() -> None:
    refusal = NoAccount(NoAccountReason.EXHAUSTED, ("pro",), other_plans=(("basic", "BASIC"),))
    error = error_of(cannot_start(None, refusal, remaining=9.0, disabled=never_asked))
    assert not error.retryable
    assert error.message == (
        "every CHART-IMG account whose plan can serve this chart is at its daily limit; no request was "
        "sent; basic (BASIC) cannot serve it: the template asks for more than their plan allows"
    )
    assert error.details["otherPlanAccounts"] == [{"accountId": "basic", "plan": "BASIC"}]
    after_limit = cannot_start(
        last_failure(ErrorCode.CHART_API_LIMIT_EXCEEDED, LIMIT), refusal, remaining=9.0, disabled=never_asked
    )
    assert error_of(after_limit).message.endswith(
        "; basic (BASIC) cannot serve it: the template asks for more than their plan allows"
    )
