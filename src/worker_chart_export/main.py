"""The CloudEvent entry point: decode -> fast filter -> execute_step. Nothing else.

Most events are no-ops (every write to any flow_run, including our own claim and finalize,
arrives here), so this module and the no-op path import no Firestore, GCS or HTTP client
and no pydantic: `execute`, `bootstrap` and their dependencies are imported only when a READY
CHART_EXPORT step is found.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import functions_framework

from worker_chart_export import events
from worker_chart_export.core.errors import ErrorCode
from worker_chart_export.environment import log_identity

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

_logging_lock = threading.Lock()
_logging_checked = False


@functions_framework.cloud_event
def on_flow_run_updated(cloud_event: CloudEvent) -> None:
    """Eventarc `google.cloud.firestore.document.v1.updated` on `flow_runs/{runId}`.

    Returns (HTTP 200) for no-ops and poison events; raises (HTTP 500, so Eventarc
    redelivers) when the step could not be claimed yet is still READY (contention, store
    unavailable), or on a crash.
    """
    identity = {"eventId": cloud_event.get("id")}
    log = _configured_logger().bind(**identity)
    # Contract §10's "received event": its attributes go on the first line of every event.
    # Most events are no-ops, so for them it is also the only line (half the logging cost).
    received = _received_attributes(cloud_event)
    try:
        decoded = events.decode_event(cloud_event)
    except events.PoisonEvent as poison:
        # Acknowledged on purpose: a redelivery would fail the same way, forever.
        log.warning(
            "event ignored: not a decodable flow_run event",
            reason=poison.reason,
            code=ErrorCode.FLOW_RUN_INVALID.value,
            **received,
        )
        return
    except Exception as exc:
        # A decoder defect is as deterministic as a bad payload: acknowledged too, but loud.
        log.error(
            "event ignored: the decoder failed",
            reason=f"{type(exc).__name__}: {exc}",
            code=ErrorCode.FLOW_RUN_INVALID.value,
            exc_info=True,
            **received,
        )
        return

    log = log.bind(runId=decoded.run_id)
    if decoded.deleted:
        log.info(
            "event received: flow_run deleted, nothing to do",
            code=ErrorCode.FLOW_RUN_NOT_FOUND.value,
            **received,
        )
        return
    step_id = decoded.chosen_step_id
    if step_id is None:
        log.info(
            "event received: no READY CHART_EXPORT step",
            flowKey=decoded.flow_key,
            code=ErrorCode.NO_READY_STEP.value,
            **received,
        )
        return
    log.info("event received", **received)
    log.info(
        "parsed event",
        flowKey=decoded.flow_key,
        payloadFormat=decoded.payload_format,
        readyChartExportSteps=list(decoded.ready_step_ids),
    )
    # An unsafe runId is still delegated: execute_step finalizes the step FAILED
    # (VALIDATION_FAILED) without writing under an unsafe path.
    _execute(decoded.run_id, step_id, log.bind(stepId=step_id), identity)


def _execute(run_id: str, step_id: str, log: Any, identity: dict[str, Any]) -> None:
    import structlog
    from werkzeug.exceptions import InternalServerError

    from worker_chart_export.bootstrap import production_runtime
    from worker_chart_export.core.errors import RedeliverEvent
    from worker_chart_export.execute import execute_step

    try:
        # execute_step's own lines take service/env/eventId from the context
        with structlog.contextvars.bound_contextvars(**identity):
            runtime = production_runtime()
            report = execute_step(run_id, step_id, ports=runtime.ports, limits=runtime.limits)
    except RedeliverEvent as exc:
        # Either the claim could not be made while the step is still READY, or a claimed
        # step's result could not be recorded (FinalizeFailed): the reason says which.
        log.error(
            "failing the invocation so Eventarc redelivers the event",
            reason=str(exc),
            errorType=type(exc).__name__,
        )
        # An HTTP 500 without a traceback: this is an expected, retryable condition.
        raise InternalServerError(description=f"redelivery requested for step {step_id}") from exc
    except Exception:
        log.error("event handling failed", exc_info=True)
        raise
    log.info(
        "event handled",
        outcome=report.outcome,
        errorCode=report.error_code,
        outputsManifestGcsUri=report.manifest_uri,
    )


def _configured_logger() -> Any:
    """structlog, configured on first use unless the host (CLI, tests) already did."""
    global _logging_checked
    from worker_chart_export import logs

    if not _logging_checked:
        with _logging_lock:
            if not _logging_checked:
                import structlog

                if not structlog.is_configured():
                    service, env = log_identity()
                    logs.configure_logging(service=service, env=env)
                _logging_checked = True
    return logs.get_logger()


def _received_attributes(cloud_event: CloudEvent) -> dict[str, Any]:
    return {
        "eventType": cloud_event.get("type"),
        "eventSource": cloud_event.get("source"),
        "eventSubject": cloud_event.get("subject"),
        "eventTime": cloud_event.get("time"),
        "payloadSize": _payload_size(cloud_event.data),
    }


def _payload_size(data: object) -> int | None:
    return len(data) if isinstance(data, str | bytes | bytearray) else None


@functions_framework.cloud_event
def advance_flow(cloud_event: CloudEvent) -> None:
    """advance_flow on `flow_runs/{runId}` events (orchestration rules): READY and the run
    status, written only when something changes, conditional on the event's version."""
    log = _configured_logger().bind(eventId=cloud_event.get("id"), function="advance_flow")
    try:
        version = events.decode_document_version(cloud_event)
    except events.PoisonEvent as poison:
        log.warning(
            "advance_flow: event ignored, not a decodable flow_run event",
            reason=poison.reason,
            code=ErrorCode.FLOW_RUN_INVALID.value,
        )
        return
    if version.document is None or version.update_time is None:
        log.info("advance_flow: flow_run deleted, nothing to advance", runId=version.run_id)
        return
    from worker_chart_export.advance import advance_version
    from worker_chart_export.bootstrap import advance_store

    # A store outage raises: HTTP 500, Eventarc redelivers (advancing is idempotent).
    result = advance_version(version.run_id, version.document, version.update_time, advance_store())
    log.info("advance_flow", **result.log_fields())


@functions_framework.http
def reap_expired_leases(request: Any) -> tuple[dict[str, Any], int]:
    """The reaper, for Cloud Scheduler: one pass, its summary as JSON."""
    from worker_chart_export.bootstrap import lease_reaper
    from worker_chart_export.reaper import reap_once
    from worker_chart_export.settings import load_settings

    _configured_logger()
    settings = load_settings()
    report = reap_once(lease_reaper(settings), max_attempts=settings.reaper_max_attempts)
    return report.to_summary(), 200
