"""What one pass of a chart request's attempt loop (api.py) ends with: what a refusal says
about its key and its request, told to the limiter (`tell_limiter`, and `judge_refusals`
once the request's fate is known), and the failure a request ends with when no attempt can
be made: every account exhausted, every key refused, no time left, or no TradingView session
that can reach its layout. The last real answer, when there was one, says more than any of
these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from worker_chart_export.adapters.chart_img.http import HttpAnswer
from worker_chart_export.adapters.chart_img.key_verdicts import KeyCheck
from worker_chart_export.adapters.chart_img.limiter import AccountLimiter, Lease, NoAccount, NoAccountReason
from worker_chart_export.adapters.chart_img.session import StepSession
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import Disposition, accounts_exhausted, refused_everywhere
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.documents import ErrorDocument
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.templates.chart_request import request_digest
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult
from worker_chart_export.logs import get_logger


@dataclass(frozen=True)
class AttemptPass:
    """One pass of the attempt loop. disposition None: nothing more can be tried."""

    disposition: Disposition | None
    result: ChartResult
    answer: HttpAnswer | None = None  # the HTTP answer `result` comes from, for record mode

    @property
    def retry_after(self) -> float | None:
        """The answer's Retry-After (seconds), which the next attempt waits at least."""
        return self.answer.retry_after if self.answer is not None else None


@dataclass
class ChartRequest:
    """One chart's attempts: where they went, the last outcome, which keys refused it."""

    call: ChartCall
    session: StepSession
    tried: list[str] = field(default_factory=list)  # account per HTTP attempt, in order
    last: AttemptPass | None = None
    refused_by: set[str] = field(default_factory=set)  # accounts whose key CHART-IMG refused for it
    # refusals not judged yet: whose fault each is (the key's or the request's) is known
    # only when the request ends (`judge_refusals`)
    pending: list[tuple[str, Answer]] = field(default_factory=list)
    refused_everywhere: bool = False  # every account that could serve it refused it
    # asks CHART-IMG for a known-good chart on a key about to be disabled (None: no check)
    check_key: KeyCheck | None = None
    # the accounts its latest attempt could go to (a layout chart's, by their sessions; None: any)
    only: frozenset[str] | None = None

    @property
    def budget(self) -> Budget:
        return self.session.budget

    @cached_property
    def digest(self) -> str:
        """What identifies the request to CHART-IMG (its body): a key's refusals count per request."""
        return request_digest(self.call)


def tell_limiter(
    limiter: AccountLimiter, request: ChartRequest, lease: Lease, refused: AttemptPass, seen: Answer, log: Any
) -> AttemptPass:
    """What a refusal says about its key (the rules: core.chart_img.key_history), told to the limiter;
    the outcome, changed where the request, not the key, is refused. A FINAL or RETRY answer
    says nothing about the key."""
    disposition, account_id, probe = refused.disposition, lease.account_id, lease.reservation.probe
    if disposition is Disposition.EXHAUSTED:
        limiter.mark_exhausted(account_id, seen)
    elif disposition is Disposition.RATE_LIMITED:
        verdict = limiter.rate_limited(account_id, seen, seen.retry_after, probe=probe)
        if verdict.cooling > 0:  # not set aside (then the limiter logged an ERROR)
            log.warning(
                "chart-img key rate-limited: cooling down",
                cooldownSeconds=round(verdict.cooling, 3),
                retryAfterSeconds=seen.retry_after,
                chartImgThrottling=verdict.throttled,  # every usable key hears 429: nobody's fault
            )
    elif disposition is Disposition.BAD_KEY:
        return _key_refused(limiter, request, lease, refused, seen, log)
    elif probe:  # nothing said about the key: the next call probes again, once its hold passes
        log.info("chart-img probe answered without a verdict on the key", httpStatus=seen.status)
    return refused


def _key_refused(
    limiter: AccountLimiter, request: ChartRequest, lease: Lease, refused: AttemptPass, seen: Answer, log: Any
) -> AttemptPass:
    """CHART-IMG refused the key (401, 403 "Forbidden"). On its probe, or when the request
    can go to no other key, the refusal is judged at once: disabled now (refused for another
    request too, no success between, or on its probe), the call moves on. Otherwise it is
    judged when the request ends (`judge_refusals`): another key may refuse the very request
    too, which makes it the request's. Once every account that could serve the call has
    refused this very request, the request is what is refused: its final failure, no key set
    aside (docs/design.md, "CHART-IMG answers"); before that, the call moves to another
    account."""
    account_id, probe = lease.account_id, lease.reservation.probe
    request.refused_by.add(account_id)
    nowhere_else = (
        set(limiter.usable_accounts(request.call.serving_plans, request.only)) <= request.refused_by
    )
    if probe or (nowhere_else and len(request.refused_by) == 1):
        if limiter.key_refused(account_id, seen, probe=probe, check=request.check_key):
            return refused
    else:
        request.pending.append((account_id, seen))
    if not nowhere_else:
        log.warning("chart-img key refused once: the call moves to another account")
        return refused
    request.refused_everywhere = True
    refused_by = sorted(request.refused_by)
    log.warning(
        "chart-img request refused by every key: its final failure, no key set aside", refusedBy=refused_by
    )
    assert isinstance(refused.result, ChartFailure)
    return AttemptPass(
        None, ChartFailure(refused_everywhere(refused.result.error, refused_by)), refused.answer
    )


def judge_refusals(limiter: AccountLimiter, request: ChartRequest, result: ChartResult, log: Any) -> None:
    """The request has ended: its refusals not yet judged are judged now. Rendered by
    another key, each refusal was its key's (the request was fine); refused by more than one
    key, never rendered, while keys it did not try remain, they were the request's: no key
    is blamed. Otherwise (refused by one key only, or by every key that could serve it, when
    no key is left to tell a refused request from revoked keys) each refusal counts against
    its key, as a refusal always did (two of different requests, no success between,
    disable it)."""
    pending, request.pending = request.pending, []
    if not pending:
        return
    if isinstance(result, ChartFailure) and len(request.refused_by) > 1 and not request.refused_everywhere:
        log.info(
            "chart-img request refused by more than one key: the request's, no key blamed",
            refusedBy=sorted(request.refused_by),
        )
        return
    for account_id, seen in pending:
        limiter.key_refused(account_id, seen, check=request.check_key)


def cannot_start(
    last: AttemptPass | None,
    refusal: NoAccount | None,
    *,
    remaining: float,
    disabled: Callable[[], list[str]],
) -> AttemptPass:
    """No attempt possible after `last` (None: before the first): all accounts exhausted or
    refused (`refusal`, each account's reason with it), or no time left (`remaining` seconds
    of the budget). Only a quota really spent is for good; keys set aside are probed again,
    and time comes back with the step's next attempt: those failures are retryable."""
    if refusal is not None and refusal.reason is NoAccountReason.EXHAUSTED:
        return _all_exhausted(last, refusal)
    if refusal is not None and refusal.reason is NoAccountReason.NO_USABLE_KEY:
        error = _no_usable_key(last, disabled(), refusal)
    elif refusal is not None and refusal.reason is NoAccountReason.SET_ASIDE:
        error = _none_free_now(last, refusal)
    elif last is not None:  # keep the last real answer: it says more than "out of time"
        error = _with_details(last.result, stoppedBy="budget")
    else:
        error = StepError(
            ErrorCode.CHART_API_FAILED,
            "the step's time budget ran out before CHART-IMG could be called",
            {"errorKind": "budget", "remainingSeconds": round(remaining, 3)},
        )
    return AttemptPass(None, ChartFailure(error.as_retryable()), last.answer if last else None)


def layout_unreachable(last: AttemptPass | None, refusal: StepError) -> AttemptPass:
    """No session can reach a layout chart now, so no call: `refusal`, or, after an answer
    (a session refused just now), that answer, which says more, as patient as `refusal`."""
    if last is None or not isinstance(last.result, ChartFailure):
        return AttemptPass(None, ChartFailure(refusal))
    error = last.result.error
    return AttemptPass(None, ChartFailure(error.as_retryable() if refusal.retryable else error), last.answer)


def _all_exhausted(last: AttemptPass | None, refusal: NoAccount) -> AttemptPass:
    others = _other_plans(refusal)
    if last is not None and _code(last.result) is ErrorCode.CHART_API_LIMIT_EXCEEDED:
        error = _with_details(last.result, exhaustedAccounts=list(refusal.exhausted_accounts), **others)
        error = replace(error, message=error.message + _other_plans_said(refusal), retryable=False)
        return AttemptPass(None, ChartFailure(error), last.answer)
    error = accounts_exhausted(list(refusal.exhausted_accounts), refusal.other_plans)
    if last is not None:  # e.g. a 5xx, then the only other account was used up
        error = StepError(
            error.code,
            f"every CHART-IMG account{_serving(refusal)} reached its daily limit before the request "
            "succeeded" + _other_plans_said(refusal),
            {**error.details, "lastError": _error_dict(last.result)},
        )
    return AttemptPass(None, ChartFailure(error))


def _no_usable_key(last: AttemptPass | None, disabled: list[str], refusal: NoAccount) -> StepError:
    if last is not None and isinstance(last.result, ChartFailure):
        return _with_details(last.result, disabledAccounts=disabled, **_other_plans(refusal))
    return StepError(
        ErrorCode.CHART_API_FAILED,
        f"CHART-IMG refused the key of every {_accounts_meant(refusal)}; no request was sent"
        + _other_plans_said(refusal),
        {"errorKind": "bad_key", "disabledAccounts": disabled, **_other_plans(refusal)},
    )


def _none_free_now(last: AttemptPass | None, refusal: NoAccount) -> StepError:
    """Every account that could serve the call is out for now, each for its own reason
    (exhausted, key disabled, set aside, cooling), not all of them for the day."""
    accounts = [{"accountId": a, "why": why} for a, why in refusal.standing]
    if last is not None and isinstance(last.result, ChartFailure):
        return _with_details(last.result, accounts=accounts, **_other_plans(refusal))
    said = "; ".join(f"{a}: {why}" for a, why in refusal.standing)
    return StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        f"no CHART-IMG account that can serve this chart can take it now ({said}); no request was sent"
        + _other_plans_said(refusal),
        {"errorKind": "no_account_now", "accounts": accounts, **_other_plans(refusal)},
    )


def _other_plans(refusal: NoAccount) -> dict[str, Any]:
    """The accounts whose plan cannot serve the call, for the failure's details."""
    if not refusal.other_plans:
        return {}
    return {"otherPlanAccounts": [{"accountId": a, "plan": plan} for a, plan in refusal.other_plans]}


def _accounts_meant(refusal: NoAccount) -> str:
    return "account that can serve this chart" if refusal.other_plans else "configured account"


def _serving(refusal: NoAccount) -> str:
    """The accounts meant, when some of the configured ones cannot serve the call."""
    return " that can serve this chart" if refusal.other_plans else ""


def _other_plans_said(refusal: NoAccount) -> str:
    if not refusal.other_plans:
        return ""
    named = ", ".join(f"{a} ({plan})" for a, plan in refusal.other_plans)
    return f"; {named} cannot serve it: the template asks for more than their plan allows"


def _code(result: ChartResult) -> ErrorCode | None:
    return result.error.code if isinstance(result, ChartFailure) else None


def _error_dict(result: ChartResult) -> ErrorDocument | dict[str, Any]:
    return result.error.to_dict() if isinstance(result, ChartFailure) else {}


def _with_details(result: ChartResult, **extra: Any) -> StepError:
    assert isinstance(result, ChartFailure)
    return replace(result.error, details={**result.error.details, **extra})


def usage_store_unavailable(call: ChartCall, exc: TransientStoreError) -> AttemptPass:
    """No quota could be reserved (the usage store is unavailable): no call, worth another
    try. CHART_API_FAILED, retryable: a chart failure is listed in the manifest, whose schema
    allows the contract's codes only (§8); errorKind says it was the store."""
    kind = type(exc).__name__
    error = StepError(
        ErrorCode.CHART_API_FAILED,
        "could not reserve CHART-IMG quota: the usage store is unavailable",
        {"errorKind": "usage_store", "exception": kind},
        retryable=True,
    )
    get_logger().warning(
        "chart-img usage store unavailable",
        runId=call.run_id,
        stepId=call.step_id,
        errorKind=kind,
    )
    return AttemptPass(Disposition.RETRY, ChartFailure(error))
