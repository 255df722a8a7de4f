"""What one pass of a chart request's attempt loop (api.py) ends with, and the failure a
request ends with when no attempt can be made: every account exhausted, every key refused,
or no time left. The last real answer, when there was one, says more than any of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from worker_chart_export.adapters.chart_img.http import HttpAnswer
from worker_chart_export.adapters.limiter import NoAccount, Refusal
from worker_chart_export.core.chart_img_answers import Disposition, accounts_exhausted
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.types import ChartFailure, ChartResult


@dataclass(frozen=True)
class Outcome:
    """One pass of the attempt loop. disposition None: nothing more can be tried."""

    disposition: Disposition | None
    result: ChartResult
    answer: HttpAnswer | None = None  # the HTTP answer `result` comes from, for record mode


def cannot_start(
    last: Outcome | None,
    refusal: NoAccount | None,
    *,
    remaining: float,
    disabled: Callable[[], list[str]],
) -> Outcome:
    """No attempt possible after `last` (None: before the first): all accounts exhausted or
    refused (`refusal`), or no time left (`remaining` seconds of the budget)."""
    if refusal is not None and refusal.reason is Refusal.NO_USABLE_KEY:
        return Outcome(None, ChartFailure(_no_usable_key(last, disabled())), last.answer if last else None)
    if refusal is not None and refusal.reason is Refusal.EXHAUSTED:
        if last is not None and _code(last.result) is ErrorCode.CHART_API_LIMIT_EXCEEDED:
            error = _with_details(last.result, exhaustedAccounts=list(refusal.exhausted_accounts))
            return Outcome(None, ChartFailure(error), last.answer)
        error = accounts_exhausted(list(refusal.exhausted_accounts))
        if last is not None:  # e.g. a 5xx, then the only other account was used up
            error = StepError(
                error.code,
                "every CHART-IMG account reached its daily limit before the request succeeded",
                {**error.details, "lastError": _error_dict(last.result)},
            )
        return Outcome(None, ChartFailure(error))
    if last is not None:  # keep the last real answer: it says more than "out of time"
        error = _with_details(last.result, stoppedBy="budget")
        return Outcome(None, ChartFailure(error), last.answer)
    error = StepError(
        ErrorCode.CHART_API_FAILED,
        "the step's time budget ran out before CHART-IMG could be called",
        {"errorKind": "budget", "remainingSeconds": round(remaining, 3)},
    )
    return Outcome(None, ChartFailure(error))


def _no_usable_key(last: Outcome | None, disabled: list[str]) -> StepError:
    if last is not None and isinstance(last.result, ChartFailure):
        return _with_details(last.result, disabledAccounts=disabled)
    return StepError(
        ErrorCode.CHART_API_FAILED,
        "CHART-IMG refused the key of every configured account; no request was sent",
        {"errorKind": "bad_key", "disabledAccounts": disabled},
    )


def _code(result: ChartResult) -> ErrorCode | None:
    return result.error.code if isinstance(result, ChartFailure) else None


def _error_dict(result: ChartResult) -> dict[str, Any]:
    return result.error.to_dict() if isinstance(result, ChartFailure) else {}


def _with_details(result: ChartResult, **extra: Any) -> StepError:
    assert isinstance(result, ChartFailure)
    return replace(result.error, details={**result.error.details, **extra})
