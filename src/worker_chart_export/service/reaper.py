"""The reaper: steps whose worker died between claim and finalize are taken back (error
model, Partial failures case 2). One pass: find expired leases, then for each, in its own
conditional write on the same claim token, READY again (attempt kept, while attempt <
max) or FAILED with STEP_LEASE_EXPIRED. A step that finished or was claimed again in the
meantime is never touched. Called by Cloud Scheduler over HTTP and by the CLI.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from worker_chart_export.core.clock import Clock
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.retry import STEP_ATTEMPTS
from worker_chart_export.core.step.reaping import ExpiredLease, LeaseFate, ReapReport
from worker_chart_export.logs import get_logger

DEFAULT_BATCH = 200


class LeaseReaper(Protocol):
    def expired_leases(self, now: datetime, limit: int) -> list[ExpiredLease]: ...

    def reap(self, lease: ExpiredLease, *, now: datetime, max_attempts: int) -> LeaseFate: ...


def reap_once(
    reaper: LeaseReaper,
    *,
    clock: Clock,
    max_attempts: int = STEP_ATTEMPTS.attempts or 1,
    batch: int = DEFAULT_BATCH,
) -> ReapReport:
    """One pass over at most `batch` expired leases (the next run picks up the rest).

    Raises TransientStoreError when the leases cannot even be listed; one lease that cannot
    be reaped is reported and the pass goes on.
    """
    log = get_logger()
    now = clock.now()
    report = ReapReport()
    for lease in reaper.expired_leases(now, batch):
        try:
            outcome = reaper.reap(lease, now=now, max_attempts=max_attempts)
        except TransientStoreError as exc:
            report.errors.append(f"{lease.run_id}/{lease.step_id}: {exc}")
            log.warning("reap failed", runId=lease.run_id, stepId=lease.step_id, reason=str(exc))
            continue
        report.add(outcome, lease)
        _log(log, outcome, lease, max_attempts)
    log.info("reaper pass finished", **report.to_summary())
    return report


def _log(log: Any, outcome: LeaseFate, lease: ExpiredLease, max_attempts: int) -> None:
    fields = {"runId": lease.run_id, "stepId": lease.step_id, "leaseExpiresAt": lease.expires_at}
    if outcome is LeaseFate.RETRIED:
        log.warning("step lease expired: READY again", **fields)
    elif outcome is LeaseFate.FAILED:
        log.error(
            "step lease expired: FAILED",
            error={"code": "STEP_LEASE_EXPIRED"},
            maxAttempts=max_attempts,
            **fields,
        )
    else:
        log.info("lease left alone", outcome=outcome.value, **fields)
