"""CHART-IMG over HTTP (contract §13): the `real` and `record` ChartApi adapters.

One logical request = at most `max_attempts` HTTP attempts across accounts, each with a
reserved quota unit and a rate token (AccountLimiter), classified by
`core.chart_api_errors`, retried per `core.retry_policy`, all inside the step's Budget.
Thread-safe: execute.py renders a step's requests from a thread pool.

Secrets: the key goes into the `x-api-key` header and nowhere else; logs and failure
details carry the account id, the HTTP status and the API's message only.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import SecretStr
from tenacity import Retrying

from worker_chart_export.adapters.accounts import (
    AccountLimiter,
    Lease,
    NoAccount,
    Refusal,
    SecretClient,
    WallClock,
    require_accounts,
    utc_now,
)
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi, replay
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_api_errors import (
    Disposition,
    accounts_exhausted,
    classify,
    error_message,
    failure_from_response,
    looks_like_png,
    not_a_png,
)
from worker_chart_export.core.errors import ConfigError, ErrorCode, StepError, TransientStoreError
from worker_chart_export.core.pacing import MonotonicClock
from worker_chart_export.core.retry_policy import BackoffWait, RetryPolicy, StopPolicy, wants_retry
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.logs import get_logger
from worker_chart_export.ports import ChartApi, UsageStore

if TYPE_CHECKING:
    from worker_chart_export.config import Settings

ADVANCED_CHART_PATH = "/v2/tradingview/advanced-chart"
Sleep = Callable[[float], None]


# --- HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpAnswer:
    """What CHART-IMG sent back: status, raw bytes, and for errors the body as JSON or text."""

    status: int
    content: bytes
    content_type: str

    def without(self, api_key: SecretStr) -> HttpAnswer:
        """Defensive: an error page that echoed the key must not carry it any further."""
        key = api_key.get_secret_value().encode("utf-8")
        if not key or key not in self.content:
            return self
        return replace(self, content=self.content.replace(key, b"<redacted>"))

    @property
    def body(self) -> Any:
        text = self.content.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text


class ChartImgClient:
    """One httpx.Client per process, pooled to the step concurrency and reused."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        transport: httpx.BaseTransport | None = None,
        monotonic: MonotonicClock = time.monotonic,
    ) -> None:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), transport=transport, limits=limits, follow_redirects=False
        )
        self._monotonic = monotonic

    def post_chart(self, body: Mapping[str, Any], api_key: SecretStr, *, timeout: float) -> HttpAnswer:
        """POST the chart request; raises httpx.TimeoutException / httpx.TransportError.

        httpx timeouts are per phase (connect, each read...), so the body is streamed and
        the whole exchange is also held to `timeout`: a server that trickles bytes cannot
        keep us past the budget.
        """
        request = self._client.build_request(
            "POST",
            ADVANCED_CHART_PATH,
            json=dict(body),
            headers={"x-api-key": api_key.get_secret_value()},
            timeout=httpx.Timeout(timeout),
        )
        deadline = self._monotonic() + timeout
        response = self._client.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if self._monotonic() > deadline:
                    raise httpx.ReadTimeout("response not complete within the time left", request=request)
            content_type = response.headers.get("content-type", "")
            return HttpAnswer(response.status_code, b"".join(chunks), content_type)
        finally:
            response.close()

    def close(self) -> None:
        self._client.close()


# --- one logical request -------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    """One pass of the attempt loop. disposition None: nothing more can be tried."""

    disposition: Disposition | None
    result: ChartResult
    answer: HttpAnswer | None = None  # the HTTP answer `result` comes from, for record mode


@dataclass
class _Request:
    call: ChartCall
    budget: Budget
    tried: list[str] = field(default_factory=list)  # account per HTTP attempt, in order
    last: _Outcome | None = None


@dataclass(frozen=True)
class Rendered:
    result: ChartResult
    answer: HttpAnswer | None  # set when the result is exactly what one HTTP answer said


class RealChartApi:
    """Modes `real` (and, wrapped by RecordChartApi, `record`): HTTP calls to CHART-IMG."""

    def __init__(
        self,
        client: ChartImgClient,
        limiter: AccountLimiter,
        *,
        request_timeout: float,
        policy: RetryPolicy | None = None,
        sleep: Sleep = time.sleep,
        monotonic: MonotonicClock = time.monotonic,
        rand: Callable[[], float] = random.random,
        mode: str = "real",
    ) -> None:
        self.mode = mode
        self.client = client
        self.limiter = limiter
        self._request_timeout = request_timeout
        self._policy = policy or RetryPolicy()
        self._sleep = sleep
        self._monotonic = monotonic
        self._rand = rand
        self._logged_steps: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._logged_lock = threading.Lock()

    def render(self, call: ChartCall, budget: Budget) -> ChartResult:
        return self.render_with_answer(call, budget).result

    def render_with_answer(self, call: ChartCall, budget: Budget) -> Rendered:
        request = _Request(call, budget)
        retrying = Retrying(
            stop=StopPolicy(self._policy, budget.remaining),
            wait=BackoffWait(self._policy, self._rand),
            retry=wants_retry,
            sleep=self._sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        outcome: _Outcome = retrying(self._attempt, request)
        result = outcome.result
        if isinstance(result, ChartFailure):
            details = {**result.error.details, "attempts": len(request.tried)}
            if request.tried:
                details["accountIds"] = list(dict.fromkeys(request.tried))
            result = ChartFailure(replace(result.error, details=details))
            self._log_global_exhaustion(call, result.error)
        return Rendered(result, outcome.answer)

    def close(self) -> None:
        self.client.close()

    # --- the attempt ---

    def _attempt(self, request: _Request) -> _Outcome:
        outcome = self._try_once(request)
        request.last = outcome
        return outcome

    def _try_once(self, request: _Request) -> _Outcome:
        max_wait = request.budget.remaining() - self._policy.min_attempt_seconds
        if max_wait < 0:
            return self._cannot_start(request, None)
        try:
            lease = self.limiter.acquire(tried=request.tried, max_wait=max_wait)
        except TransientStoreError as exc:  # quota unknown: no call, but worth another try
            error = StepError(
                ErrorCode.CHART_API_FAILED,
                "could not reserve CHART-IMG quota: the usage store is unavailable",
                {"errorKind": "usage_store", "exception": type(exc).__name__},
            )
            get_logger().warning(
                "chart-img usage store unavailable",
                runId=request.call.run_id,
                stepId=request.call.step_id,
                errorKind=type(exc).__name__,
            )
            return _Outcome(Disposition.RETRY, ChartFailure(error))
        if isinstance(lease, NoAccount):
            return self._cannot_start(request, lease)
        request.tried.append(lease.account_id)
        return self._send(request, lease, attempt=len(request.tried))

    def _send(self, request: _Request, lease: Lease, *, attempt: int) -> _Outcome:
        call = request.call
        timeout = min(self._request_timeout, request.budget.remaining())
        log = get_logger().bind(
            runId=call.run_id,
            stepId=call.step_id,
            chartTemplateId=call.chart_template_id,
            symbol=call.chart_img_symbol,
            interval=call.interval,
            accountId=lease.account_id,
            attempt=attempt,
            chartsApi=self._log_context(call, lease.account_id),
        )
        log.info("chart api attempt started", timeoutSeconds=round(timeout, 3))
        started = self._monotonic()
        try:
            answer = self.client.post_chart(call.body, lease.api_key, timeout=timeout)
        except httpx.HTTPError as exc:
            kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
            error = StepError(
                ErrorCode.CHART_API_FAILED,
                f"CHART-IMG could not be reached ({kind}: {type(exc).__name__})",
                {"errorKind": kind, "exception": type(exc).__name__},
            )
            self._log_request(log, started, None, error)
            return _Outcome(Disposition.RETRY, ChartFailure(error))
        if answer.status != 200:
            answer = answer.without(lease.api_key)
        disposition = classify(answer.status, None if answer.status == 200 else answer.body)
        if disposition is Disposition.SUCCESS:
            if looks_like_png(answer.content):
                self._log_request(log, started, 200, None)
                return _Outcome(None, ChartSuccess(answer.content, lease.account_id), answer)
            error = not_a_png(answer.content_type, len(answer.content))
            self._log_request(log, started, 200, error)
            return _Outcome(None, ChartFailure(error))  # not recorded as a fixture
        error = failure_from_response(answer.status, answer.body)
        if disposition is Disposition.ROTATE:
            self.limiter.mark_exhausted(lease.account_id)
        self._log_request(log, started, answer.status, error)
        next_step = None if disposition is Disposition.FINAL else disposition
        return _Outcome(next_step, ChartFailure(error), answer)

    def _cannot_start(self, request: _Request, refusal: NoAccount | None) -> _Outcome:
        """No attempt possible: all accounts exhausted, or no time left in the budget."""
        last = request.last
        if refusal is not None and refusal.reason is Refusal.EXHAUSTED:
            if last is not None and _code(last.result) is ErrorCode.CHART_API_LIMIT_EXCEEDED:
                error = _with_details(last.result, exhaustedAccounts=list(refusal.exhausted_accounts))
                return _Outcome(None, ChartFailure(error), last.answer)
            error = accounts_exhausted(list(refusal.exhausted_accounts))
            if last is not None:  # e.g. a 5xx, then the only other account was used up
                error = StepError(
                    error.code,
                    "every CHART-IMG account reached its daily limit before the request succeeded",
                    {**error.details, "lastError": _error_dict(last.result)},
                )
            return _Outcome(None, ChartFailure(error))
        if last is not None:  # keep the last real answer: it says more than "out of time"
            error = _with_details(last.result, stoppedBy="budget")
            return _Outcome(None, ChartFailure(error), last.answer)
        error = StepError(
            ErrorCode.CHART_API_FAILED,
            "the step's time budget ran out before CHART-IMG could be called",
            {"errorKind": "budget", "remainingSeconds": round(request.budget.remaining(), 3)},
        )
        return _Outcome(None, ChartFailure(error))

    # --- logs ---

    def _log_context(self, call: ChartCall, account_id: str | None) -> dict[str, Any]:
        context: dict[str, Any] = {"mode": self.mode, "accountId": account_id}
        if self.mode == "record":
            context["fixtureKey"] = call.fixture_key
        return context

    def _log_request(
        self, log: Any, started: float, http_status: int | None, error: StepError | None
    ) -> None:
        fields: dict[str, Any] = {
            "status": "failed" if error else "succeeded",
            "httpStatus": http_status,
            "errorCode": error.code.value if error else None,
            "durationMs": round((self._monotonic() - started) * 1000),
        }
        if error is not None:
            fields["errorKind"] = error.details.get("errorKind", "http")
            fields["apiMessage"] = error.details.get("message")
            log.warning("chartsApi.request", **fields)
        else:
            log.info("chartsApi.request", **fields)

    def _log_global_exhaustion(self, call: ChartCall, error: StepError) -> None:
        """One ERROR event per step when every account is out (log-based alert, §10)."""
        if error.code is not ErrorCode.CHART_API_LIMIT_EXCEEDED:
            return
        exhausted = self.limiter.exhausted_accounts()
        if set(exhausted) != set(self.limiter.account_ids):
            return
        step = (call.run_id, call.step_id)
        with self._logged_lock:
            if step in self._logged_steps:
                return
            self._logged_steps[step] = None
            while len(self._logged_steps) > 1024:  # a warm instance serves many steps
                self._logged_steps.popitem(last=False)
        get_logger().error(
            "chart-img accounts exhausted",
            error={"code": ErrorCode.CHART_API_LIMIT_EXCEEDED.value},
            exhaustedAccounts=list(exhausted),
            runId=call.run_id,
            stepId=call.step_id,
            chartsApi={"mode": self.mode},
        )


def _code(result: ChartResult) -> ErrorCode | None:
    return result.error.code if isinstance(result, ChartFailure) else None


def _error_dict(result: ChartResult) -> dict[str, Any]:
    return result.error.to_dict() if isinstance(result, ChartFailure) else {}


def _with_details(result: ChartResult, **extra: Any) -> StepError:
    assert isinstance(result, ChartFailure)
    return replace(result.error, details={**result.error.details, **extra})


# --- record mode ---------------------------------------------------------------------------


class RecordChartApi:
    """Mode `record`: replay a fixture when there is one, else call CHART-IMG and save it."""

    mode = "record"

    def __init__(self, library: FixtureLibrary, real: RealChartApi) -> None:
        self.library = library
        self.real = real

    def render(self, call: ChartCall, budget: Budget) -> ChartResult:
        log = get_logger().bind(
            runId=call.run_id,
            stepId=call.step_id,
            chartTemplateId=call.chart_template_id,
            chartsApi={"mode": self.mode, "fixtureKey": call.fixture_key},
        )
        recorded = self.library.lookup(call.fixture_key)
        if recorded is not None:
            result = replay(recorded)
            error_code = _code(result)
            log.info(
                "chart api fixture replayed",
                status="failed" if error_code else "succeeded",
                errorCode=error_code.value if error_code else None,
            )
            return result
        rendered = self.real.render_with_answer(call, budget)
        answer = rendered.answer
        if answer is None:  # no HTTP answer (transport error) or 200-not-PNG: nothing to keep
            return rendered.result
        try:
            if answer.status == 200:
                path = self.library.save_png(call.fixture_key, answer.content)
            else:
                body = answer.body
                path = self.library.save_error(
                    call.fixture_key, answer.status, body, error_message(body) or "ERROR"
                )
            log.info("chart api fixture recorded", fixture=path.name, httpStatus=answer.status)
        except OSError as exc:  # recording is a convenience; the step goes on as in real mode
            log.warning("chart api fixture not recorded", errorKind=type(exc).__name__)
        return rendered.result

    def close(self) -> None:
        self.real.close()


# --- wiring --------------------------------------------------------------------------------


def build_chart_api(
    settings: Settings,
    usage_store: UsageStore | None,
    *,
    transport: httpx.BaseTransport | None = None,
    now: WallClock = utc_now,
    sleep: Sleep = time.sleep,
    monotonic: MonotonicClock = time.monotonic,
    secret_client: SecretClient | None = None,
    retry_policy: RetryPolicy | None = None,
    rand: Callable[[], float] = random.random,
) -> ChartApi:
    """The ChartApi for settings.charts_api_mode; real/record need accounts and a usage store."""
    from worker_chart_export.config import ChartsApiMode

    library = FixtureLibrary(settings.charts_fixtures_dir)
    if settings.charts_api_mode is ChartsApiMode.MOCK:
        return MockChartApi(library)
    accounts = require_accounts(settings, secret_client=secret_client)
    if usage_store is None:
        raise ConfigError("CHARTS_API_MODE", f"{settings.charts_api_mode.value} mode needs a usage store")
    limiter = AccountLimiter(
        accounts,
        usage_store,
        default_limit=settings.chart_img_daily_limit,
        default_rate=settings.chart_img_rate_per_second,
        default_burst=settings.chart_img_burst,
        now=now,
        monotonic=monotonic,
        sleep=sleep,
    )
    client = ChartImgClient(
        settings.chart_img_base_url,
        max_connections=settings.chart_concurrency,
        transport=transport,
        monotonic=monotonic,
    )
    policy = retry_policy or RetryPolicy()
    policy = replace(
        policy,
        max_attempts=settings.chart_img_max_attempts,
        # an attempt never needs more than its own timeout
        min_attempt_seconds=min(policy.min_attempt_seconds, settings.chart_img_request_timeout_seconds),
    )
    real = RealChartApi(
        client,
        limiter,
        request_timeout=settings.chart_img_request_timeout_seconds,
        policy=policy,
        sleep=sleep,
        monotonic=monotonic,
        rand=rand,
        mode=settings.charts_api_mode.value,
    )
    if settings.charts_api_mode is ChartsApiMode.RECORD:
        return RecordChartApi(library, real)
    return real
