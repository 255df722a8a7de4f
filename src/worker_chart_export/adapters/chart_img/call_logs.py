"""The lines a chart request writes (contract §10, §13.4): each HTTP attempt's
`chartsApi.request` with its status, duration and what came of its unit, and the one ERROR a
step writes when every account is out (the log-based alert's). Account ids, never keys."""

from __future__ import annotations

from typing import Any

from worker_chart_export.adapters.chart_img.limiter import AccountLimiter
from worker_chart_export.adapters.chart_img.session import StepSession
from worker_chart_export.core.chart_img.usage import Refund
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.types import ChartCall
from worker_chart_export.logs import get_logger


def log_context(mode: str, call: ChartCall, account_id: str | None) -> dict[str, Any]:
    context: dict[str, Any] = {"mode": mode, "accountId": account_id}
    if mode == "record":
        context["fixtureKey"] = call.fixture_key
    return context


def log_request(
    log: Any,
    clock: Clock,
    started: float,
    http_status: int | None,
    error: StepError | None,
    *,
    refund: Refund | None = None,
) -> None:
    fields: dict[str, Any] = {
        "status": "failed" if error else "succeeded",
        "httpStatus": http_status,
        "errorCode": error.code.value if error else None,
        "durationMs": round((clock.monotonic() - started) * 1000),
    }
    if refund is not None:  # a call whose unit was given back: how many units came back today
        fields["unitGivenBack"] = refund.given_back
        fields["refundedToday"] = refund.refunded_today
    if error is not None:
        fields["errorKind"] = error.details.get("errorKind", "http")
        fields["apiMessage"] = error.details.get("message")
        log.warning("chartsApi.request", **fields)
    else:
        log.info("chartsApi.request", **fields)


def log_global_exhaustion(
    limiter: AccountLimiter, session: StepSession, call: ChartCall, error: StepError, *, mode: str
) -> None:
    """One ERROR event per step when every account is out (log-based alert, §10)."""
    if error.code is not ErrorCode.CHART_API_LIMIT_EXCEEDED:
        return
    exhausted = limiter.exhausted_accounts()
    usable = set(limiter.usable_accounts())
    if not usable or not usable <= set(exhausted) or not session.first_to_log_exhaustion():
        return
    get_logger().error(
        "chart-img accounts exhausted",
        error={"code": ErrorCode.CHART_API_LIMIT_EXCEEDED.value},
        exhaustedAccounts=list(exhausted),
        runId=call.run_id,
        stepId=call.step_id,
        chartsApi={"mode": mode},
    )
