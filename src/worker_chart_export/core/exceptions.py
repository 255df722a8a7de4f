"""Every exception the worker raises on purpose, in one tree, with what each one leads to.

    WorkerError
    ├── ConfigError ............ the configuration is unusable: CLI exit 2 naming the variable
    │                            (or the flag that set it); `serve` exits 2 before serving; in a
    │                            function, HTTP 500 with one ERROR line
    ├── UsageError ............. CLI: exit 2, the message as one stderr line
    ├── StepSelectionError ..... run-local's --step-id names no CHART_EXPORT step: exit 2
    ├── PoisonEvent ............ an event that can never be processed: HTTP 200 (acknowledged)
    │   │                        and one WARNING line, code FLOW_RUN_INVALID
    │   ├── DecoderDefect ...... the decoder itself failed: HTTP 200, one ERROR line with the traceback
    │   └── UndecodableValue ... a value Firestore never writes: a PoisonEvent naming it, HTTP 200
    ├── StoreError ............. raised by adapters: a store could not do what a port asked
    │   ├── TransientStoreError  worth another try (an outage, contention given up on): the claim:
    │   │   │                    RedeliverEvent; templates: RedeliverEvent (read before the claim:
    │   │   │                    nothing claimed; after it: the step keeps its lease); the manifest's
    │   │   │                    fence: RedeliverEvent, never a FAILED step (the retry reuses the PNGs);
    │   │   │                    the finalize: retried within its budget, then FinalizeFailed; a quota
    │   │   │                    reservation: the chart's CHART_API_FAILED; advance_flow: HTTP 500;
    │   │   │                    the reaper: HTTP 503; the CLI's Firestore commands: exit 2
    │   │   └── ClaimContended . the step stayed READY while every claim commit lost to other
    │   │                        writes of the run: RedeliverEvent
    │   ├── ArtifactWriteError . an object was not written: retried within the step's budget
    │   │                        while `transient`; then a PNG is recorded in the manifest's
    │   │                        failures[] as GCS_WRITE_FAILED, the manifest as the step's
    │   │                        MANIFEST_WRITE_FAILED, and a transient one makes the step wait
    │   ├── ArtifactListError .. the step's folder could not be listed (the reuse lookup): one
    │   │                        WARNING, every chart is rendered as usual
    │   ├── ArtifactReadError .. an earlier PNG's first bytes could not be read (the reuse
    │   │                        lookup): that chart is rendered anew, named in the WARNING
    │   ├── BucketUnusable ..... the charts bucket is missing, refuses us or cannot be reached:
    │   │                        `serve` exits 2 before serving (a ConfigError naming it); a step
    │   │                        asks for a redelivery before its claim (StorageUnavailable), or,
    │   │                        gone since, after it (RedeliverEvent: left to its lease)
    │   └── ClaimSuperseded .... the fence refused the manifest (our lease was taken back):
    │                            recorded on the step as STEP_LEASE_EXPIRED
    ├── InvalidManifestError ... the manifest breaks its schema, a defect: recorded on the step as
    │                            WORKER_INTERNAL_ERROR, then HTTP 500
    └── RedeliverEvent ......... the service's decision: HTTP 500 and one ERROR line, so Eventarc
        │                        delivers the event again; run-local: exit 1. Also a claimed
        │                        step whose manifest fence or template read met a transient
        │                        store error: it keeps its lease, and the reaper makes it READY again
        ├── FinalizeFailed ..... the step's result could not be recorded within the finalize budget
        └── StorageUnavailable . the bucket cannot store what the step would pay for: HTTP 503,
                                 nothing claimed, no CHART-IMG call

Anything else is a defect: HTTP 500 and one ERROR line with the traceback; a claimed step is
first recorded FAILED with WORKER_INTERNAL_ERROR, so it never stays RUNNING by our fault.
Adapters raise only StoreErrors, UsageError and ConfigError; whether an event is delivered
again is the service's decision (service/execute.py, service/finalize.py), and its HTTP answer
the function's (functions/main.py). The codes recorded on a step are core/error_codes.py's.

Two tools keep their own exceptions, beside the code that raises and catches them:
`StackError` (tools/devstack/processes.py; `stack up` exits 2, one line) and `ViewInputError`
(tools/view/model.py; `view` exits 2). Neither crosses into the service or the functions, and
nothing the served function imports needs them.
Nothing here imports anything: the functions' no-op path imports this module.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base for the exceptions the worker raises on purpose."""


class ConfigError(WorkerError):
    """The worker's own configuration is unusable (bad env, malformed accounts JSON...)."""

    def __init__(self, setting: str, problem: str, *, source: str | None = None) -> None:
        """`setting`: the environment variable a user sets it with; `problem`: on its own, so
        that an edge which took the value from somewhere else (a CLI flag, a file) names that
        instead (`render(label)`); `source`: where exactly, when the setting only points at
        the value (e.g. the secret version read)."""
        self.setting = setting
        self.problem = problem
        self.source = source
        super().__init__(self.render())

    def render(self, label: str | None = None) -> str:
        if label is None:
            label = f"{self.setting} {self.source}" if self.source else self.setting
        return f"{label}: {self.problem}"


class UsageError(WorkerError):
    """Bad flags, unreadable input files, unusable credentials, an unreachable Firestore (CLI)."""


class StepSelectionError(WorkerError):
    """An explicitly requested step cannot be taken (missing, or not a CHART_EXPORT step)."""


class PoisonEvent(WorkerError):
    """The event can never be processed: acknowledge it (2xx) after a WARNING, no writes."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DecoderDefect(PoisonEvent):
    """The decoder itself failed: deterministic as a bad payload, but our bug (an ERROR line)."""


class UndecodableValue(PoisonEvent):
    """A value Firestore never sends (a timestamp outside years 1-9999, nanos beyond a second)."""


class StoreError(WorkerError):
    """A store (Firestore, GCS, files) could not do what a port asked."""


class TransientStoreError(StoreError):
    """A store failed in a way worth retrying: timeouts, 5xx, unavailable, contention."""


class ClaimContended(TransientStoreError):
    """Every claim commit lost to another write of the run while the step stayed READY."""


class ArtifactWriteError(StoreError):
    """Writing an object failed. `transient`: worth another try (a 5xx, a timeout, a reset),
    which the service makes within the step's budget (core.retry.ARTIFACT_WRITES)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class ArtifactListError(StoreError):
    """Listing a folder of the bucket failed after the adapter's own bounded retries."""


class ArtifactReadError(StoreError):
    """Reading an object failed after the adapter's own bounded retries."""


class BucketUnusable(StoreError):
    """The charts bucket does not exist, refuses our requests, or could not be reached."""


class ClaimSuperseded(StoreError):
    """Our claim was taken back (lease expired, reaped) before our result was written."""


class InvalidManifestError(WorkerError):
    """The worker built a manifest its own contract rejects: a bug, never written out."""


class RedeliverEvent(WorkerError):
    """The invocation must fail (HTTP 5xx) so that Eventarc delivers the event again."""


class FinalizeFailed(RedeliverEvent):
    """The step's result could not be recorded within the finalize budget."""


class StorageUnavailable(RedeliverEvent):
    """The charts bucket cannot take the step's artifacts: nothing is claimed or paid for."""
