"""The port the account wing spends quota through: `chart_img_accounts_usage/{accountId}`
(Firestore in production, a JSON file for run-local). The limiter and the key verdicts call it;
the service never does, so it lives here, beside them, not in service/ports.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from worker_chart_export.core.chart_img.usage import Pacing, Refund, ReservationRequest
from worker_chart_export.core.types import Reservation


class UsageStore(Protocol):
    """chart_img_accounts_usage/{accountId}: daily usage windows and shared pacing
    (contract §14.4; the rules are core/chart_img/usage.py's)."""

    def reserve(
        self,
        account_id: str,
        *,
        default_limit: int,
        now: datetime,
        pacing: Pacing | None = None,
        max_wait: float = float("inf"),
    ) -> Reservation:
        """In one atomic step: reset a stale window, then take one unit of quota and (with
        `pacing`) the next send slot, unless exhausted or the slot is over `max_wait` away.

        Raises TransientStoreError when the store cannot be reached.
        """
        ...

    def reserve_many(
        self, requests: Sequence[ReservationRequest], *, now: datetime, max_wait: float
    ) -> dict[str, list[Reservation]]:
        """Several accounts in one round trip, each as `core.chart_img.usage.reserve_many` computes it
        (its list ends at the first refusal). An account absent from the answer has nothing
        reserved (its state was not known here, or changed meanwhile): reserve it one at a
        time. Raises TransientStoreError when the store cannot be reached.
        """
        ...

    def refund(self, account_id: str, *, day: str) -> Refund:
        """Give back one unit reserved in the window `day` by an attempt that never reached
        CHART-IMG (core.chart_img.usage.refund_one): `usageToday` one less, `refundedToday` one more, the
        pacing state untouched; nothing when the window moved on or CHART-IMG refused the day.
        Raises TransientStoreError when the store cannot be reached."""
        ...

    def read(self, account_ids: Sequence[str]) -> dict[str, Mapping[str, Any] | None]:
        """The accounts' documents as they are now (None: no document yet), in one round
        trip; the versions the next reservations write on. Raises TransientStoreError."""
        ...

    def mark_exhausted(self, account_id: str, *, now: datetime, reason: str) -> None:
        """After CHART-IMG's quota answer: `exhaustedUntil` (the next UTC midnight) and
        `exhaustedReason` (core.chart_img.usage.exhausted_fields); `usageToday` stays the units spent."""
        ...

    def mark_disabled(self, account_id: str, *, reason: str, now: datetime) -> None:
        """After CHART-IMG refused the key for two different requests (or on its probe):
        `disabled` for 15 minutes, with `disabledReason` (core.chart_img.usage.disabled_fields); every
        reservation meanwhile refuses it, the first after it is the probe."""
        ...

    def mark_cooling(self, account_id: str, *, reason: str, now: datetime) -> None:
        """After the 429 streak rule (or a probe answered 429): `coolUntil` 15 minutes ahead
        and `coolReason` (core.chart_img.set_aside.cooling_fields); then a probe."""
        ...

    def mark_serving(self, account_id: str, *, now: datetime) -> None:
        """After a probe answered 200: the set-aside fields cleared
        (core.chart_img.set_aside.serving_again_fields)."""
        ...
