"""Shape and dependency-graph checks of a flow_run, for advance_flow (docs/flow_rules.md § Invalid).

Pure and total: any JSON-like value is checked without raising. A flow_run that fails these
checks is never advanced; advance_flow fails the run with FLOW_RUN_INVALID and these details.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from worker_chart_export.core.types import StepStatus

if TYPE_CHECKING:
    from worker_chart_export.core.documents import FlowRunDocument


class RunStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


RUN_STATUSES = frozenset(s.value for s in RunStatus)
STEP_STATUSES = frozenset(s.value for s in StepStatus)
CANCEL_FLAG: Final = "cancelRequested"


def is_one_of(value: object, allowed: frozenset[str]) -> bool:
    """Membership that never raises: a document may hold a list or a map where a status belongs."""
    return isinstance(value, str) and value in allowed


@dataclass(frozen=True)
class GraphProblems:
    """Everything wrong with a flow_run, each list sorted so reports are deterministic."""

    malformed_fields: tuple[str, ...] = ()  # field paths, e.g. steps.a.dependsOn
    unknown_depends_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # step -> ids
    cycle_step_ids: tuple[str, ...] = ()  # steps that lie on a dependency cycle

    def __bool__(self) -> bool:
        return bool(self.malformed_fields or self.unknown_depends_on or self.cycle_step_ids)

    def message(self) -> str:
        parts = [f"malformed field(s): {', '.join(self.malformed_fields)}"] if self.malformed_fields else []
        parts += [
            f"step {step_id} depends on unknown step(s): {', '.join(ids)}"
            for step_id, ids in self.unknown_depends_on.items()
        ]
        if self.cycle_step_ids:
            parts.append(f"dependency cycle through step(s): {', '.join(self.cycle_step_ids)}")
        return "flow_run is invalid: " + "; ".join(parts)

    def details(self) -> dict[str, Any]:
        """Firestore-storable (no arrays inside arrays), only the kinds of problem found."""
        details: dict[str, Any] = {}
        if self.malformed_fields:
            details["malformedFields"] = list(self.malformed_fields)
        if self.unknown_depends_on:
            details["unknownDependsOn"] = {k: list(v) for k, v in self.unknown_depends_on.items()}
        if self.cycle_step_ids:
            details["cycleStepIds"] = list(self.cycle_step_ids)
        return details


def _depends_on(step: Mapping[str, object]) -> list[str] | None:
    """The step's dependencies; None when `dependsOn` is present but not a list of strings."""
    deps = step.get("dependsOn", [])
    if isinstance(deps, list) and all(isinstance(d, str) for d in deps):
        return deps
    return None


def dependency_map(steps: Mapping[Any, Any]) -> dict[str, list[str]]:
    """stepId -> dependsOn. A malformed step is still a known id, but contributes no edges."""
    out: dict[str, list[str]] = {}
    for step_id, step in steps.items():
        if isinstance(step_id, str):
            deps = _depends_on(step) if isinstance(step, Mapping) else None
            out[step_id] = deps if deps is not None else []
    return out


def _malformed_fields(flow_run: FlowRunDocument) -> list[str]:
    bad: list[str] = []
    if not is_one_of(flow_run.get("status"), RUN_STATUSES):
        bad.append("status")
    if CANCEL_FLAG in flow_run and not isinstance(flow_run[CANCEL_FLAG], bool):
        bad.append(CANCEL_FLAG)
    steps = flow_run.get("steps")
    if not isinstance(steps, Mapping):
        return sorted([*bad, "steps"])
    for step_id, step in steps.items():
        path = f"steps.{step_id}" if isinstance(step_id, str) else f"steps[{step_id!r}]"
        if not isinstance(step_id, str) or not isinstance(step, Mapping):
            bad.append(path)
            continue
        if not is_one_of(step.get("status"), STEP_STATUSES):
            bad.append(f"{path}.status")
        if _depends_on(step) is None:
            bad.append(f"{path}.dependsOn")
    return sorted(bad)


def _unknown_depends_on(deps: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    unknown = {step_id: tuple(sorted({d for d in ids if d not in deps})) for step_id, ids in deps.items()}
    return {step_id: ids for step_id, ids in sorted(unknown.items()) if ids}


def cycle_step_ids(deps: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """Steps on a cycle of known edges: members of a strongly connected component with more than
    one step, or with an edge to itself (Tarjan's algorithm, iterative so deep chains are fine)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: set[str] = set()
    edges = {n: [d for d in ds if d in deps] for n, ds in deps.items()}
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = _pop_component(stack, on_stack, node)
                if len(component) > 1 or node in edges[node]:
                    found.update(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return tuple(sorted(found))


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    component: list[str] = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == root:
            return component


def find_problems(flow_run: FlowRunDocument) -> GraphProblems:
    """Malformed fields, unknown ids in dependsOn, and cycles; empty (falsy) when valid."""
    steps = flow_run.get("steps")
    deps = dependency_map(steps) if isinstance(steps, Mapping) else {}
    return GraphProblems(
        malformed_fields=tuple(_malformed_fields(flow_run)),
        unknown_depends_on=_unknown_depends_on(deps),
        cycle_step_ids=cycle_step_ids(deps),
    )
