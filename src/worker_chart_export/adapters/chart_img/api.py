"""RealChartApi: modes `real` (and, wrapped by RecordChartApi, `record`) over HTTP.

One logical request = at most `max_attempts` HTTP attempts across accounts, each with a
reserved quota unit and a rate token (AccountLimiter), classified by
`core.chart_img.answers`, retried per `core.chart_img.request_retries`, all inside the step's Budget.
Every attempt holds one of the client's connection permits (permits.py) from before it
reserves until its answer is read: a reservation never waits for a connection.
`for_step` opens a step's session (session.py): it takes as many permits as are free (no
waiting) for the step's first wave and reserves that many first attempts in one round trip
(AccountLimiter.acquire_many, slots at most UNIT_HOLD_SECONDS ahead); each render of the
step takes one of those leases, with its permit, for its first attempt (unless CHART-IMG has
refused that account meanwhile), and acquires permit and lease one by one after.
A layout chart goes only to the accounts with a TradingView session fit for it
(tv_sessions.py: its template's session, else the account's own; none for a private layout:
refused before any call), is sent with that session's headers and held to its own timeout
(CHART_IMG_LAYOUT_TIMEOUT_SECONDS: the docs ask for 60 s), and a session CHART-IMG refuses is
set aside, never the key. Thread-safe: execute.py renders a step's requests from a thread
pool. Logs and failure details carry the account id, the session's id, the HTTP status and
the API's message, never a key or a session.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import httpx
from tenacity import Retrying

from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.attempts import (
    AttemptPass,
    ChartRequest,
    cannot_start,
    judge_refusals,
    layout_unreachable,
    tell_limiter,
    usage_store_unavailable,
)
from worker_chart_export.adapters.chart_img.call_logs import attempt_log, log_global_exhaustion, log_request
from worker_chart_export.adapters.chart_img.http import NEVER_LEFT, ChartImgClient
from worker_chart_export.adapters.chart_img.known_good import KnownGoodChart
from worker_chart_export.adapters.chart_img.limiter import UNIT_HOLD_SECONDS, AccountLimiter, Lease, NoAccount
from worker_chart_export.adapters.chart_img.session import RenderedCall, StepSession
from worker_chart_export.adapters.chart_img.tv_sessions import ANY_ACCOUNT, TradingViewSessions
from worker_chart_export.adapters.chart_img.whole_chart import chart_or_retry
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import (
    Disposition,
    classify,
    error_message,
    failure_from_response,
)
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.layout_sessions import LayoutAccess
from worker_chart_export.core.chart_img.request_retries import AGAIN, RetryPolicy, wants_retry
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import ChartCall, ChartFailure
from worker_chart_export.logs import get_logger


@dataclass(frozen=True)
class Seams:
    """The clock the runtime hands down, and what a test replaces: that clock, the HTTP
    transport, the randomness of the backoff, the backoff itself (None: core/retry.py's
    CHART_ATTEMPTS; the attempts stay CHART_IMG_MAX_ATTEMPTS')."""

    clock: Clock
    transport: httpx.BaseTransport | None = None
    rand: Callable[[], float] = random.random
    retry_policy: RetryPolicy | None = None


class RealChartApi:
    """Modes `real` (and, wrapped by RecordChartApi, `record`): HTTP calls to CHART-IMG."""

    mode = "real"  # RecordChartApi sets "record" on the one it wraps: its attempts' logs say so

    def __init__(
        self,
        client: ChartImgClient,
        limiter: AccountLimiter,
        *,
        policy: RetryPolicy | None = None,
        known_good: Mapping[str, Any] | None = None,
        sessions: TradingViewSessions | None = None,
        seams: Seams,
    ) -> None:
        # layout charts: their sessions, their own timeout
        self.sessions = sessions or TradingViewSessions((), (), clock=seams.clock)
        # a key about to be disabled for refused requests is first asked for a chart CHART-IMG
        # renders (the bundled sample's): only the key at fault goes
        self._known_good = None if known_good is None else KnownGoodChart(self, known_good)
        self.client = client
        self.limiter = limiter
        self.policy = policy or RetryPolicy()
        self._clock = seams.clock
        self._rand = seams.rand
        self._permits = client.permits

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[StepSession]:
        """The step's session for this block: the first attempts of `first_wave` reserved
        in one round trip, as far as connections are free; what its renders have not used
        when it ends is dropped, and its permits given back (session.py)."""
        session = StepSession(
            self, budget, self._prepay(first_wave, budget), limiter=self.limiter, permits=self._permits
        )
        try:
            yield session
        finally:
            session.end()

    def _prepay(self, first_wave: Sequence[ChartCall], budget: Budget) -> list[tuple[ChartCall, Lease]]:
        """A lease for each of the first calls of the wave that get one of the permits free
        now, on an account whose plan serves it, each lease holding its permit (the other
        calls reserve when they get a connection). A layout chart only some accounts may send
        (by their sessions), or none, reserves on its own."""
        first_wave = [c for c in first_wave if self._access(c) == ANY_ACCOUNT]
        permits = self._permits.take_available(len(first_wave))
        leases: list[tuple[ChartCall, Lease]] = []
        try:
            if permits:
                leases = self._reserve_first_wave(first_wave[:permits], budget)
        finally:
            self._permits.release(permits - len(leases))
        return leases

    def _reserve_first_wave(
        self, calls: Sequence[ChartCall], budget: Budget
    ) -> list[tuple[ChartCall, Lease]]:
        max_wait = min(budget.remaining() - self.policy.min_attempt_seconds, UNIT_HOLD_SECONDS)
        if max_wait < 0:
            return []
        try:
            leases = self.limiter.acquire_many([c.serving_plans for c in calls], max_wait=max_wait)
        except TransientStoreError:
            return []  # each call then tries on its own, and says so if the store stays away
        prepaid = [(call, lease) for call, lease in zip(calls, leases, strict=True) if lease is not None]
        if prepaid:  # the units the step holds from now on, before any attempt's line says so
            get_logger().info(
                "chart-img first wave reserved",
                runId=calls[0].run_id,
                stepId=calls[0].step_id,
                units=dict(Counter(lease.account_id for _, lease in prepaid)),
            )
        return prepaid

    def render_in(self, session: StepSession, call: ChartCall) -> RenderedCall:
        check = None if self._known_good is None else partial(self._known_good.key_works, session.budget)
        request = ChartRequest(call, session, check_key=check)
        retrying = Retrying(
            stop=self.policy.stop(session.budget),
            wait=self.policy.wait(session.budget, self._rand),
            retry=wants_retry,
            sleep=self._clock.sleep,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            reraise=True,
        )
        outcome: AttemptPass = retrying(self._attempt, request)
        result = outcome.result
        log = get_logger().bind(runId=call.run_id, stepId=call.step_id)
        judge_refusals(self.limiter, request, result, log)
        if isinstance(result, ChartFailure):
            details = {**result.error.details, "attempts": len(request.tried)}
            if request.tried:
                details["accountIds"] = list(dict.fromkeys(request.tried))
            error = replace(result.error, details=details)
            # the attempts ended on a bad moment (not the request, not a spent quota): a
            # later try of the same request may succeed (core/step/patience.py)
            result = ChartFailure(error.as_retryable() if outcome.disposition in AGAIN else error)
            log_global_exhaustion(self.limiter, session, call, result.error, mode=self.mode)
        return RenderedCall(result, outcome.answer)

    def close(self) -> None:
        self.client.close()

    # --- the attempt ---

    def _attempt(self, request: ChartRequest) -> AttemptPass:
        outcome = self._try_once(request)
        request.last = outcome
        return outcome

    def _try_once(self, request: ChartRequest) -> AttemptPass:
        access = self._access(request.call)
        if access.refusal is not None:  # no session can reach the layout: no call
            request.session.drop_prepaid(request.call)
            return layout_unreachable(request.last, access.refusal)
        request.only = access.only
        if self._max_wait(request) < 0:
            return self._cannot_start(request, None)
        prepaid = None if request.tried else request.session.take_prepaid(request.call, access.only)
        # a connection first, then (and only then) a quota unit and a send slot
        if prepaid is None and not self._permits.acquire(timeout=self._max_wait(request)):
            return self._cannot_start(request, None)
        try:
            if prepaid is not None:
                request.tried.append(prepaid.account_id)
                return self._send(request, prepaid, attempt=1, prepaid=True)
            return self._reserve_and_send(request)
        finally:
            self._permits.release()

    def _access(self, call: ChartCall) -> LayoutAccess:
        """Where a layout chart may go now, by the sessions of the accounts whose plan serves it."""
        return self.sessions.access(call, self.limiter.serving_accounts(call.serving_plans))

    def _max_wait(self, request: ChartRequest) -> float:
        """How long an attempt may wait to start and still have its minimum time."""
        return request.budget.remaining() - self.policy.min_attempt_seconds

    def _reserve_and_send(self, request: ChartRequest) -> AttemptPass:
        max_wait = self._max_wait(request)
        if max_wait < 0:  # the wait for a connection took what was left
            return self._cannot_start(request, None)
        try:
            lease = self.limiter.acquire(
                tried=request.tried, max_wait=max_wait, plans=request.call.serving_plans, only=request.only
            )
        except TransientStoreError as exc:  # quota unknown: no call, but worth another try
            return usage_store_unavailable(request.call, exc)
        if isinstance(lease, NoAccount):
            return self._cannot_start(request, lease)
        request.tried.append(lease.account_id)
        return self._send(request, lease, attempt=len(request.tried))

    def _send(
        self, request: ChartRequest, lease: Lease, *, attempt: int, prepaid: bool = False
    ) -> AttemptPass:
        """The lease's call, once its slot comes. "chart api attempt started" is written
        before that wait: from the moment its unit is taken, every attempt has a line, so the
        log of an instance that died tells the units it held (`prepaid`: its unit was taken
        with the step's first wave, whose line said so)."""
        call = request.call
        ahead = lease.slot_in(self._clock.now())
        own_timeout = self.client.request_timeout if call.layout is None else self.sessions.timeout
        timeout = min(own_timeout, request.budget.remaining() - ahead)
        session = self.sessions.for_call(call, lease.account_id)
        named = session.id if session is not None else None  # its name: the value is in headers only
        log = attempt_log(self.mode, call, lease.account_id, attempt, session=named)
        started_fields: dict[str, Any] = {"timeoutSeconds": round(timeout, 3)}
        if ahead > 0:
            started_fields["slotInSeconds"] = round(ahead, 3)
        if prepaid:
            started_fields["prepaid"] = True
        log.info("chart api attempt started", **started_fields)
        if timeout < self.policy.min_attempt_seconds:
            return self._not_sent(request, lease, log)
        lease = self.limiter.wait_for_slot(lease)
        started = self._clock.monotonic()
        try:
            layout_id = call.layout.layout_id if call.layout is not None else None
            answer = self.client.post_chart(
                call.body, lease.api_key, timeout=timeout, layout_id=layout_id, session=session
            )
        except httpx.HTTPError as exc:
            return self._unreached(exc, lease, log, started)
        if answer.status != 200:
            answer = answer.redacted(known_keys.redaction())
        body = None if answer.status == 200 else answer.body
        disposition = classify(answer.status, body, session_sent=session is not None)
        if disposition is Disposition.SUCCESS:
            # the key works: its 429 streak, refusals (and a set-aside it was probed out of) end
            self.limiter.succeeded(lease.account_id, probe=lease.reservation.probe)
            if session is not None:
                self.sessions.served(session.id)
            return chart_or_retry(call, answer, lease.account_id, log, (self._clock, started))
        # a 429 is refused before anything is rendered: read as uncounted by CHART-IMG, its
        # unit given back (docs/design.md, "The books follow CHART-IMG's charge")
        refund = self.limiter.give_back(lease) if answer.status == 429 else None
        error = failure_from_response(
            answer.status, answer.body, template_id=call.chart_template_id, layout=call.layout, session=named
        )
        log_request(log, self._clock, started, answer.status, error, refund=refund)
        next_step = None if disposition is Disposition.FINAL else disposition
        refused = AttemptPass(next_step, ChartFailure(error), answer)
        seen = Answer(answer.status, error_message(answer.body), answer.retry_after, request.digest)
        if disposition is Disposition.SESSION_REFUSED and named is not None:
            self.sessions.refused(named, call, seen)  # the session's, never the key's
        return tell_limiter(self.limiter, request, lease, refused, seen, log)

    def _unreached(self, exc: httpx.HTTPError, lease: Lease, log: Any, started: float) -> AttemptPass:
        """No answer: transient. When the call provably never left (no connection was made),
        CHART-IMG cannot have counted it, so its unit is given back."""
        kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
        details: dict[str, Any] = {"errorKind": kind, "exception": type(exc).__name__}
        refund = self.limiter.give_back(lease) if isinstance(exc, NEVER_LEFT) else None
        said = ""
        if refund is not None and refund.given_back:
            details["unitGivenBack"] = True
            said = "; the call never left, its unit was given back"
        error = StepError(
            ErrorCode.CHART_API_FAILED,
            f"CHART-IMG could not be reached ({kind}: {type(exc).__name__}){said}",
            details,
        )
        log_request(log, self._clock, started, None, error, refund=refund)
        return AttemptPass(Disposition.RETRY, ChartFailure(error))

    def _not_sent(self, request: ChartRequest, lease: Lease, log: Any) -> AttemptPass:
        """The unit is taken but the budget has less than an attempt's minimum left (the
        reservation itself took it: a store slow to commit): a call sent now could only burn
        the unit, its answer never read. It is not sent; its unit goes back."""
        refund = self.limiter.give_back(lease)
        outcome = self._cannot_start(request, None)
        assert isinstance(outcome.result, ChartFailure)
        log_request(log, self._clock, self._clock.monotonic(), None, outcome.result.error, refund=refund)
        return outcome

    def _cannot_start(self, request: ChartRequest, refusal: NoAccount | None) -> AttemptPass:
        return cannot_start(
            request.last, refusal, remaining=request.budget.remaining(), disabled=self._disabled_accounts
        )

    def _disabled_accounts(self) -> list[str]:
        return sorted(set(self.limiter.account_ids) - set(self.limiter.usable_accounts()))
