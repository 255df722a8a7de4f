"""Plain values that cross the ports. No behaviour, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import StepError

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument, StepOutputs

JsonDict = dict[str, Any]


class StepStatus(StrEnum):
    PENDING = "PENDING"
    READY = "READY"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


CHART_EXPORT = "CHART_EXPORT"


@dataclass(frozen=True)
class ChartCall:
    """One logical CHART-IMG request: one template of one step."""

    run_id: str
    step_id: str
    chart_template_id: str
    chart_img_symbol: str  # TradingView symbol, e.g. BINANCE:BTCUSDT
    interval: str  # the step's timeframe, e.g. 1h
    body: Mapping[str, Any]  # full JSON body: template request + symbol + interval
    fixture_key: str  # e.g. BINANCE_BTCUSDT__1h__price_psar_adi_v1
    # the CHART-IMG plans whose accounts may serve it (its template asks no more than they
    # allow); None: any account
    serving_plans: frozenset[str] | None = None


@dataclass(frozen=True)
class ListedObject:
    """One object of a bucket listing, with what the listing says of it (no content read)."""

    name: str  # its path in the bucket
    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)  # the object's custom metadata


@dataclass(frozen=True)
class ChartSuccess:
    png: bytes
    account_id: str | None = None  # None in mock mode


@dataclass(frozen=True)
class ChartFailure:
    error: StepError  # CHART_API_FAILED / CHART_API_LIMIT_EXCEEDED / CHART_API_MOCK_MISSING


ChartResult = ChartSuccess | ChartFailure


class ClaimStatus(StrEnum):
    CLAIMED = "CLAIMED"
    CONFLICT = "CONFLICT"  # step is no longer READY (or vanished): no-op
    NOT_FOUND = "NOT_FOUND"  # flow_run document does not exist: no-op


@dataclass(frozen=True)
class Claim:
    token: str
    attempt: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class ClaimResult:
    status: ClaimStatus
    reason: str
    # the flow_run as read inside the winning transaction: the authoritative inputs
    flow_run: FlowRunDocument | None = None
    claim: Claim | None = None


def _no_outputs() -> StepOutputs:
    return {}


@dataclass(frozen=True)
class StepFinal:
    """What finalize writes onto steps[stepId]: SUCCEEDED or FAILED (with `error`), or, with
    `retry_at`, that the step waits: it stays RUNNING under its claim, held back by `error`
    (a bad moment), its lease moved to `retry_at` (core/step/patience.py)."""

    status: StepStatus  # SUCCEEDED or FAILED; RUNNING while it waits
    finished_at: datetime  # when this execution ended
    outputs: StepOutputs = field(default_factory=_no_outputs)  # e.g. {"outputsManifestGcsUri": ...}
    error: StepError | None = None
    retry_at: datetime | None = None

    @classmethod
    def waiting(
        cls, finished_at: datetime, retry_at: datetime, cause: StepError, outputs: StepOutputs | None = None
    ) -> StepFinal:
        return cls(StepStatus.RUNNING, finished_at, outputs or {}, cause, retry_at)


@dataclass(frozen=True)
class FinalizeResult:
    written: bool
    reason: str


class ReservationRefusal(StrEnum):
    EXHAUSTED = "EXHAUSTED"  # today's quota is used up
    BUSY = "BUSY"  # the account's next send slot is further away than the caller can wait
    DISABLED = "DISABLED"  # CHART-IMG refused its key: set aside until a probe (the usage document says so)
    COOLING = "COOLING"  # set aside by the 429 streak rule until a probe (the usage document says so)


@dataclass(frozen=True)
class Reservation:
    """Result of trying to take one unit of an account's daily quota (and its next send slot)."""

    account_id: str
    reserved: bool
    usage_today: int  # after the reservation, if reserved
    daily_limit: int
    # Not part of a reservation's identity (account, outcome, usage, limit):
    send_at: datetime | None = field(default=None, compare=False)  # when to send, if reserved
    refusal: ReservationRefusal | None = field(default=None, compare=False)  # why not, if not
    tat: float | None = field(default=None, compare=False)  # the pacing state as last seen
    day: str | None = field(default=None, compare=False)  # the window it was counted in, if reserved
    probe: bool = field(default=False, compare=False)  # the first call on a key set aside till now
