"""The documents the worker reads and writes, as TypedDicts: a flow_run (`flow_runs/{runId}`),
its steps, a CHART_EXPORT step's inputs and outputs, the error object. One key per property of
contracts/flow_run.schema.json, required where it is required (tests/unit/core/
test_documents.py holds them to the schema). The schema allows other keys, which the worker
leaves as they are; a document read from a store is untrusted until checked, so the rules
that take one still look before they use a value.

`as_flow_run` is where a document read from a store or an event becomes a FlowRunDocument.
Imported for types only on the no-op path (annotations are not evaluated there). No
`from __future__ import annotations` here: Python 3.11's TypedDict sees `Required` only in
evaluated annotations.
"""

from collections.abc import Mapping
from typing import Any, Required, TypedDict, overload


class ErrorDocument(TypedDict, total=False):
    """`error` on a step, a run or a manifest's failure (`core.error_codes.StepError.to_dict`)."""

    code: Required[str]
    message: Required[str]
    details: dict[str, Any]


class ChartRequestInput(TypedDict, total=False):
    """One element of a CHART_EXPORT step's `inputs.requests`."""

    chartTemplateId: Required[str]


class ChartExportInputs(TypedDict, total=False):
    """A CHART_EXPORT step's `inputs`."""

    minImages: Required[int]
    requests: Required[list[ChartRequestInput]]


class StepOutputs(TypedDict, total=False):
    """A CHART_EXPORT step's `outputs`, written by its finalize."""

    outputsManifestGcsUri: str


class StepWait(TypedDict):
    """One element of a step's `waits`: an attempt held back by a bad window, and why."""

    attempt: int
    at: str
    retryAt: str
    error: ErrorDocument


class StepDocument(TypedDict, total=False):
    """`steps[stepId]`: what every step has, and what a CHART_EXPORT step adds (timeframe,
    inputs, outputs) and its claim writes (attempt, claimToken, leaseExpiresAt, startedAt)."""

    stepType: Required[str]
    status: Required[str]
    dependsOn: list[str]
    timeframe: str
    inputs: ChartExportInputs
    outputs: StepOutputs
    error: ErrorDocument
    startedAt: str
    finishedAt: str
    attempt: int
    claimToken: str
    leaseExpiresAt: str
    retryAt: str
    waits: list[StepWait]


class StepUpdate(TypedDict, total=False):
    """The fields of a step a claim, a finalize or a reap sets (`core.step.step_rules`'s
    plans): a part of a `StepDocument`, merged into it."""

    status: str
    startedAt: str
    finishedAt: str
    attempt: int
    claimToken: str
    leaseExpiresAt: str
    error: ErrorDocument
    retryAt: str
    waits: list[StepWait]


class RunScope(TypedDict, total=False):
    """What the run is about: `scope.symbol` is what `{symbol}` stands for in a template."""

    symbol: Required[str]


class FlowRunDocument(TypedDict, total=False):
    """`flow_runs/{runId}`: one run of a flow, its steps keyed by stepId."""

    runId: Required[str]
    flowKey: Required[str]
    status: Required[str]
    scope: Required[RunScope]
    steps: Required[dict[str, StepDocument]]
    createdAt: str
    updatedAt: str
    cancelRequested: bool
    error: ErrorDocument


@overload
def as_flow_run(document: Mapping[str, Any]) -> FlowRunDocument: ...
@overload
def as_flow_run(document: Mapping[str, Any] | None) -> FlowRunDocument | None: ...
def as_flow_run(document: Any) -> Any:
    """A flow_run as a store or an event gave it (None: absent), typed for the rules that take
    it: the one place a map becomes a FlowRunDocument (typed by the overloads above). Not a
    check, and nothing is dropped: the store or the decoder made sure it is a map (a local
    file, that it has a runId and a steps map), and every rule that takes a FlowRunDocument
    looks at a value before it trusts it (`core.step.step_rules.steps_of` and `step_of` take
    only maps, `attempt_of` only counts, `core.flow.flow_graph.find_problems` and
    `core.step.validation.validate_step` report what is malformed)."""
    return document
