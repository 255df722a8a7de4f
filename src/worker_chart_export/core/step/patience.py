"""A bad window costs time, never the run: what a step that fell short comes to.

After its charts and its manifest, a step is SUCCEEDED (`len(items) >= minImages`, contract
§7.1), or it fell short. Short, it is FAILED at once only when waiting cannot help: the
charts that failed for good (what the request caused, an account's quota really spent, a
missing fixture) leave fewer than minImages possible. When the charts that failed for a bad
moment (an outage, a throttle, a store blip, the budget spent waiting: `StepError.retryable`)
could still make it, the step WAITS: it stays RUNNING, its lease moved to the moment it may
be tried again (`core.retry.STEP_ATTEMPTS`: 1 min doubling to 8, 5 attempts), the reaper
makes it READY then (the worker never writes READY: worker contract §3.2), and the next
claim reuses every PNG already paid for (core/step/reuse.py). Once the step's attempts are
spent it is FAILED, its error naming every attempt's cause. A manifest that could not be
stored is such a bad moment too (error model, partial failures 3), and so is a PNG write.

Pure: the caller passes the counts, the failures, the attempt and the policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import StepError
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.step.success import insufficient_images_error
from worker_chart_export.core.types import StepStatus

if TYPE_CHECKING:
    from worker_chart_export.core.documents import ErrorDocument, StepDocument, StepWait

# the waits a step keeps in its history at most (bounded: the run document must stay small)
MAX_WAITS_KEPT = 20
MAX_MESSAGE_CHARS = 400


@dataclass(frozen=True)
class Succeeded:
    pass


@dataclass(frozen=True)
class Failed:
    error: StepError


@dataclass(frozen=True)
class Waits:
    until: datetime
    cause: StepError


Verdict = Succeeded | Failed | Waits


@dataclass(frozen=True)
class StepAttempt:
    """Which attempt of the step this is, under which policy, ending when, after which waits."""

    number: int
    policy: Backoff
    now: datetime
    earlier: Sequence[StepWait] = ()


def judge_charts(
    items_count: int, failures: Sequence[StepError], *, min_images: int, requested: int, attempt: StepAttempt
) -> Verdict:
    """The step's verdict from its charts: SUCCEEDED, WAITS (the charts that failed for a bad
    moment could still make minImages, and attempts are left), or FAILED."""
    if items_count >= min_images:
        return Succeeded()
    error = _naming_a_cause(
        insufficient_images_error(items_count, min_images, requested, [f.code for f in failures]), failures
    )
    still_possible = items_count + sum(1 for f in failures if f.retryable)
    if still_possible < min_images:
        return Failed(error)  # what failed for good leaves too few: no wait helps
    return after_bad_moment(error, attempt)


def _naming_a_cause(error: StepError, failures: Sequence[StepError]) -> StepError:
    """The step's error, its message ending with the words of one failure of its code: a
    person reading `waits` or the FAILED step sees why, not only how many."""
    example = next((f for f in failures if f.code is error.code), None)
    if example is None:
        return error
    return replace(error, message=f"{error.message}: {example.message}"[:MAX_MESSAGE_CHARS])


def after_bad_moment(cause: StepError, attempt: StepAttempt) -> Waits | Failed:
    """A step held back by a bad moment only: it waits while attempts are left, else it is
    FAILED with every attempt's cause."""
    if attempt.number < (attempt.policy.attempts or 1):
        return Waits(attempt.now + timedelta(seconds=attempt.policy.delay(attempt.number)), cause)
    return Failed(attempts_spent(cause, attempt=attempt.number, earlier=attempt.earlier))


def attempts_spent(cause: StepError, *, attempt: int, earlier: Sequence[StepWait]) -> StepError:
    """The last attempt's cause, naming every attempt's (the waits recorded on the step)."""
    history: list[dict[str, Any]] = [dict(w) for w in earlier]
    history.append({"attempt": attempt, "error": {"code": cause.code.value, "message": cause.message}})
    return replace(
        cause,
        message=f"{cause.message}; after {attempt} attempt(s), each held back by a bad moment",
        details={**cause.details, "attempts": history[-MAX_WAITS_KEPT:]},
        retryable=False,
    )


def wait_record(attempt: int, at: datetime, until: datetime, cause: StepError) -> StepWait:
    """One wait as the step keeps it: which attempt, when it ended, until when it waits, why."""
    return {
        "attempt": attempt,
        "at": rfc3339_utc(at),
        "retryAt": rfc3339_utc(until),
        "error": {"code": cause.code.value, "message": cause.message},
    }


def waits_of(step: StepDocument | Mapping[str, Any] | None) -> list[StepWait]:
    """The waits a step recorded, each as written (a document from a store is untrusted: an
    entry of another shape is left out)."""
    waits = (step or {}).get("waits")
    if not isinstance(waits, list):
        return []
    return [wait for entry in waits if (wait := _wait(entry)) is not None]


def _wait(entry: Any) -> StepWait | None:
    if not isinstance(entry, Mapping):
        return None
    attempt, at, until, error = (entry.get(k) for k in ("attempt", "at", "retryAt", "error"))
    if not (isinstance(attempt, int) and isinstance(at, str) and isinstance(until, str)):
        return None
    if not (isinstance(error, Mapping) and isinstance(error.get("code"), str)):
        return None
    said: ErrorDocument = {"code": str(error["code"]), "message": str(error.get("message", ""))}
    return {"attempt": attempt, "at": at, "retryAt": until, "error": said}


def waits_now(step: Mapping[str, Any] | None) -> bool:
    """The step is waiting out a bad window: RUNNING, with the moment it may be tried again
    (only this worker writes `retryAt`)."""
    return (
        step is not None and step.get("status") == StepStatus.RUNNING and isinstance(step.get("retryAt"), str)
    )


def waiting_step_ids(steps: Mapping[str, Any]) -> list[str]:
    """The steps that wait, by step id (the order READY steps are taken in)."""
    return sorted(step_id for step_id, step in steps.items() if isinstance(step, Mapping) and waits_now(step))
