"""The CloudEvent entry point: decode -> fast filter -> execute_step. Nothing else.

Most events are no-ops (every write to any flow_run, including our own claim and finalize,
arrives here), so this module and the no-op path import no Firestore, GCS or HTTP client
and no pydantic: `execute`, `bootstrap` and their dependencies are imported only when a READY
CHART_EXPORT step is found.

A new CloudEvent entry goes beside the others, as `@functions_framework.cloud_event` over
`@cloud_event_entry` over `def entry(cloud_event, log)`: it then shares the request's log
scope and trace, the poison handling (raise PoisonEvent: 200 and one WARNING line) and the
crash handling (500 and one ERROR line) of envelope.py. An HTTP entry gets the request scope, trace
and the one-line guarantee from serve.py's middleware (`create_function_app(target, "http")`).
What each exception answers is drawn in one tree, in core/exceptions.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import functions_framework

from worker_chart_export import logs
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.exceptions import (
    PoisonEvent,
    RedeliverEvent,
    StorageUnavailable,
    TransientStoreError,
)
from worker_chart_export.functions.envelope import (
    cloud_event_entry,
    decode_flow_run_event,
    decode_version_event,
    http_entry,
    install_on_hosting_app,
    received_attributes,
)

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

    from worker_chart_export.core.step.step_rules import RunVersion


@functions_framework.cloud_event
@cloud_event_entry
def on_flow_run_updated(cloud_event: CloudEvent, log: Any) -> None:
    """Eventarc `google.cloud.firestore.document.v1.updated` on `flow_runs/{runId}`.

    Returns (HTTP 200) for no-ops and poison events; raises (HTTP 500, so Eventarc
    redelivers) when the step could not be claimed yet is still READY (contention, store
    unavailable), or on a crash.
    """
    decoded = decode_flow_run_event(cloud_event)
    # Contract §10's "received event": its attributes go on the first line of every event.
    # Most events are no-ops, so for them it is also the only line (half the logging cost).
    received = received_attributes(cloud_event)
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
    log = log.bind(stepId=step_id)
    seen = _seen_version(cloud_event, log)
    _execute(decoded.run_id, step_id, seen, log, {"eventId": cloud_event.get("id")})


@functions_framework.cloud_event
@cloud_event_entry
def advance_flow(cloud_event: CloudEvent, log: Any) -> None:
    """advance_flow on Eventarc `google.cloud.firestore.document.v1.written` for
    `flow_runs/{runId}` (creations, updates, deletes: a created run starts by itself) under the
    orchestration rules: READY and the run status, written only when something changes,
    conditional on the event's version. A store outage: HTTP 500 with one ERROR line, Eventarc
    redelivers (advancing is idempotent)."""
    version = decode_version_event(cloud_event)  # PoisonEvent: acknowledged with one WARNING
    log = log.bind(function="advance_flow", runId=version.run_id)
    if version.document is None:
        log.info("advance_flow: flow_run deleted, nothing to advance", eventType=cloud_event.get("type"))
        return
    if version.update_time is None:  # Firestore always sends it: a forged or foreign event
        raise PoisonEvent("the document carries no update_time: there is no version to write on")
    from werkzeug.exceptions import InternalServerError

    from worker_chart_export.bootstrap import runtime
    from worker_chart_export.service.advance import advance_version

    store = runtime().advance_store()
    try:
        result = advance_version(version.run_id, version.document, version.update_time, store)
    except TransientStoreError as exc:
        # expected and retryable: one line without a traceback, and a redelivery
        log.error("advance_flow failed: Eventarc redelivers the event", reason=str(exc))
        raise InternalServerError(description="advance_flow: Firestore unavailable") from exc
    log.info("advance_flow", created=version.created, **result.log_fields())


@functions_framework.http
@http_entry
def reap_expired_leases(request: Any) -> tuple[dict[str, Any], int]:
    """The reaper, for Cloud Scheduler (POST; the body is ignored): one pass, its summary as
    JSON. Another method: 405. A store outage: 503 with one ERROR line (the scheduler's next
    run, or its retry, reaps what this one could not)."""
    log = logs.configured_logger().bind(function="reap_expired_leases")
    if request.method != "POST":
        log.warning("request rejected: the reaper is run by POST", httpMethod=request.method, httpStatus=405)
        return {"error": "the reaper is run by POST"}, 405
    from worker_chart_export.bootstrap import runtime
    from worker_chart_export.service.reaper import reap_once

    reaper = runtime().reaper()
    try:
        report = reap_once(reaper.leases, clock=reaper.clock, max_attempts=reaper.max_attempts)
    except TransientStoreError as exc:
        log.error("reaper pass failed: Firestore unavailable", reason=str(exc), httpStatus=503)
        return {"error": str(exc)}, 503
    return report.to_summary(), 200


# --- the worker's work path


def _seen_version(cloud_event: CloudEvent, log: Any) -> RunVersion | None:
    """The whole version the event carries, for the claim to be planned from (one commit when
    it is current); None when it cannot be had whole: the claim then reads the document first,
    since the skim already showed a READY step that acknowledging would leave waiting."""
    from worker_chart_export.core.step.step_rules import RunVersion

    try:
        version = decode_version_event(cloud_event)
    except PoisonEvent as poison:
        log.warning("event document not decodable whole: the claim reads it first", reason=poison.reason)
        return None
    if version.document is None or version.update_time is None:
        return None
    return RunVersion(version.document, version.update_time)


def _execute(run_id: str, step_id: str, seen: RunVersion | None, log: Any, identity: dict[str, Any]) -> None:
    import structlog
    from werkzeug.exceptions import InternalServerError, ServiceUnavailable

    from worker_chart_export.bootstrap import runtime
    from worker_chart_export.service.execute import execute_step

    try:
        # execute_step's own lines take service/env/eventId from the context
        with structlog.contextvars.bound_contextvars(**identity):
            step = runtime().step()
            report = execute_step(
                run_id, step_id, ports=step.ports, limits=step.limits, clock=step.clock, seen=seen
            )
    except RedeliverEvent as exc:
        # The claim could not be made while the step is still READY, the bucket cannot store
        # anything (StorageUnavailable, found before the claim), or a claimed step's result
        # could not be recorded or fenced (FinalizeFailed, a store blip): the reason says which.
        log.error(
            "failing the invocation so Eventarc redelivers the event",
            reason=str(exc),
            errorType=type(exc).__name__,
        )
        # Without a traceback: an expected, retryable condition; 503 when a store we depend
        # on is unavailable and nothing was claimed, 500 otherwise.
        description = f"redelivery requested for step {step_id}"
        if isinstance(exc, StorageUnavailable):
            raise ServiceUnavailable(description=description) from exc
        raise InternalServerError(description=description) from exc
    except Exception as exc:
        log.error("event handling failed", exc_info=True)
        # logged here, with runId and stepId: the entry answers 500 without a second line
        raise InternalServerError(description="event handling failed") from exc
    log.info(
        "event handled",
        outcome=report.outcome,
        errorCode=report.error_code,
        outputsManifestGcsUri=report.manifest_uri,
    )


install_on_hosting_app()
