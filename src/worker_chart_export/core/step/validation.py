"""Input validation of a CHART_EXPORT step (contract §4.1; docs/design.md, "Validation").

Every problem is collected, each naming the field it is about; the step then fails with
VALIDATION_FAILED and a message listing them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from worker_chart_export.core.chart_img.plans import PLANS, AccountPlans, rank
from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.limits import LayoutBudget, StepLimits
from worker_chart_export.core.naming import SAFE_SEGMENT, fixture_key, is_safe_segment
from worker_chart_export.core.step.step_rules import step_of
from worker_chart_export.core.templates.chart_request import (
    build_layout_body,
    build_request_body,
    resolve_chart_img_symbol,
)
from worker_chart_export.core.templates.symbols import base_symbol_problem, symbol_problem
from worker_chart_export.core.templates.template_check import StoredTemplate
from worker_chart_export.core.templates.template_rules import interval_problem, shown
from worker_chart_export.core.types import ChartCall, LayoutTarget

if TYPE_CHECKING:
    from worker_chart_export.core.documents import (
        ChartExportInputs,
        ChartRequestInput,
        FlowRunDocument,
        StepDocument,
    )

# Far above any real step (an account renders 44 charts a day), low enough that a step's
# error and manifest stay small documents.
MAX_REQUESTS = 100
# What a step error keeps of the problems: Firestore documents and log entries have limits.
MAX_PROBLEMS_KEPT = 20
MAX_PROBLEM_CHARS = 300


@dataclass(frozen=True)
class ValidatedStep:
    run_id: str
    step_id: str
    symbol: str
    timeframe: str
    min_images: int
    requests: list[ChartRequestInput]  # inputs.requests[] as given, for manifest.requested[]
    templates: dict[str, Mapping[str, Any]]
    calls: list[ChartCall]  # one per request, in request order


def requested_template_ids(step: StepDocument | None) -> list[str]:
    """The chartTemplateIds worth fetching; tolerant of malformed input (validation reports it)."""
    inputs = step.get("inputs") if step is not None else None
    requests = inputs.get("requests") if isinstance(inputs, Mapping) else None
    if not isinstance(requests, list):
        return []
    ids = [r.get("chartTemplateId") for r in requests if isinstance(r, Mapping)]
    return sorted({i for i in ids if is_safe_segment(i)})


def _check_template(
    template_id: str,
    template: StoredTemplate | None,
    plans: AccountPlans,
    symbol: str | None,
    layout_budget: LayoutBudget | None = None,
) -> tuple[list[str], frozenset[str]]:
    """(the template's problems, the plans that may serve it): its own problems (checked once
    per stored version and plan) under each account's plan, then the symbol it makes of this
    step's scope.symbol; a layout template, the time one layout call needs. Valid when some
    account's plan allows it."""
    where = f"chart_templates/{template_id}"
    if template is None:
        return [f"{where}: template not found"], frozenset()
    serving = frozenset(plan.name for plan in plans.plans if not template.problems(plan))
    if not serving:
        return _unservable(where, template, plans), serving
    if layout_budget is not None and "layout" in template.document_keys:
        late = layout_budget.problem()
        if late is not None:
            return [f"{where}.layout: {late}"], serving
    symbol_template = template.symbol_template
    if symbol is None or not isinstance(symbol_template, str):
        return [], serving
    resolved = resolve_chart_img_symbol(symbol_template, symbol)
    problem = symbol_problem(resolved, require_exchange=True)
    if problem is None:
        return [], serving
    return [
        f"{where}.chartImgSymbolTemplate: {shown(symbol_template)} with scope.symbol {symbol!r} "
        f"gives {shown(resolved)}, not a symbol CHART-IMG accepts: {problem}"
    ], serving


def _unservable(where: str, template: StoredTemplate, plans: AccountPlans) -> list[str]:
    """No account's plan allows the template: its problems under the best plan configured,
    led by the plan it needs when a bigger one would allow it."""
    best = plans.best
    problems = [f"{where}{p.suffix}: {p.message}" for p in template.problems(best)]
    needed = next(
        (plan for plan in PLANS.values() if rank(plan) > rank(best) and not template.problems(plan)), None
    )
    if needed is None:
        return problems
    return [
        f"{where}: needs the {needed.name} plan (or above), which no configured account has "
        f"({plans.describe()})",
        *problems,
    ]


def validate_step(
    flow_run: FlowRunDocument,
    run_id: str,
    step_id: str,
    templates: Mapping[str, StoredTemplate],
    limits: StepLimits,
) -> ValidatedStep | StepError:
    """The step's inputs and templates checked as CHART-IMG would check them under the
    accounts' plans (a template some account can serve is valid, and its call goes only to
    such accounts), before any call; a layout template only when the step's charts have
    time for one layout call (`limits.layout_budget`; None: no call is made, mock mode)."""
    problems = _id_problems(flow_run, run_id, step_id)
    symbol = _symbol(flow_run, problems)
    step = step_of(flow_run, step_id)
    prefix = f"steps.{step_id}"
    if step is None:
        return _failed([*problems, f"{prefix}: step not found"])
    timeframe = step.get("timeframe")
    timeframe_problem = interval_problem(timeframe)
    if timeframe_problem is not None:
        problems.append(f"{prefix}.timeframe: {timeframe_problem}")
    inputs = step.get("inputs")
    if not isinstance(inputs, Mapping):
        return _failed([*problems, f"{prefix}.inputs: must be an object with minImages and requests"])
    request_list = _requests(prefix, inputs.get("requests"), problems)
    min_images = _min_images(prefix, inputs, problems)
    serving: dict[str, frozenset[str]] = {}
    for request in request_list:
        template_id = request["chartTemplateId"]
        found, serving[template_id] = _check_template(
            template_id, templates.get(template_id), limits.plans, symbol, limits.layout_budget
        )
        problems += found
    if problems:
        return _failed(problems)
    assert isinstance(symbol, str) and isinstance(timeframe, str) and isinstance(min_images, int)
    used: dict[str, Mapping[str, Any]] = {
        r["chartTemplateId"]: templates[r["chartTemplateId"]].document for r in request_list
    }
    market = _Market(symbol, timeframe, limits.default_timezone)
    return ValidatedStep(
        run_id=run_id,
        step_id=step_id,
        symbol=symbol,
        timeframe=timeframe,
        min_images=min_images,
        requests=request_list,
        templates=used,
        calls=[
            replace(
                _call(run_id, step_id, template_id, template, market),
                serving_plans=serving[template_id],
            )
            for template_id, template in used.items()
        ],
    )


def _id_problems(flow_run: FlowRunDocument, run_id: str, step_id: str) -> list[str]:
    """Ids that become paths are untrusted input; the stored id must be the document's."""
    problems = [
        f"{name}: {value!r} is not a safe path segment ({SAFE_SEGMENT.pattern}, no '..')"
        for name, value in (("runId", run_id), ("stepId", step_id))
        if not is_safe_segment(value)
    ]
    doc_run_id = flow_run.get("runId")
    if doc_run_id is not None and doc_run_id != run_id:
        problems.append(f"runId: document says {doc_run_id!r} but it is stored as flow_runs/{run_id}")
    return problems


def _symbol(flow_run: FlowRunDocument, problems: list[str]) -> str | None:
    """scope.symbol when it is a base symbol (core/templates/symbols.py), else None and a problem."""
    scope = flow_run.get("scope")
    symbol = scope.get("symbol") if isinstance(scope, Mapping) else None
    if not isinstance(scope, Mapping):
        problems.append(f"scope: must be an object with a symbol, got {type(scope).__name__}")
        return None
    problem = base_symbol_problem(symbol)
    if problem is not None:
        problems.append(f"scope.symbol: {shown(symbol)}: {problem} (e.g. BTCUSDT, ES1!, BTCUSDT.P)")
        return None
    assert isinstance(symbol, str)
    return symbol


def _requests(prefix: str, requests: Any, problems: list[str]) -> list[ChartRequestInput]:
    """The valid requests, in order; each problem named by its index."""
    if not isinstance(requests, list) or not requests:
        problems.append(f"{prefix}.inputs.requests: must be a non-empty list")
        return []
    if len(requests) > MAX_REQUESTS:
        problems.append(f"{prefix}.inputs.requests: {len(requests)} requests, at most {MAX_REQUESTS} allowed")
        return []
    kept: list[ChartRequestInput] = []
    seen: set[str] = set()
    for index, request in enumerate(requests):
        where = f"{prefix}.inputs.requests[{index}]"
        template_id = request.get("chartTemplateId") if isinstance(request, Mapping) else None
        if not isinstance(request, Mapping):
            problems.append(f"{where}: must be an object with chartTemplateId")
        elif not is_safe_segment(template_id):
            problems.append(
                f"{where}.chartTemplateId: {template_id!r} is not a safe template id "
                f"({SAFE_SEGMENT.pattern}, no '..')"
            )
        elif template_id in seen:
            problems.append(f"{where}.chartTemplateId: {template_id!r} is requested twice")
        elif not _is_plain_json(request):
            problems.append(f"{where}: must hold plain JSON values only (it is copied into the manifest)")
        else:
            seen.add(template_id)
            # a ChartRequestInput: a map of plain JSON values with a safe chartTemplateId (checked above)
            kept.append(dict(request))  # type: ignore[arg-type]
    return kept


def _min_images(prefix: str, inputs: ChartExportInputs, problems: list[str]) -> int | None:
    min_images = inputs.get("minImages")
    requests = inputs.get("requests")
    if isinstance(min_images, bool) or not isinstance(min_images, int):
        problems.append(f"{prefix}.inputs.minImages: {min_images!r} must be an integer")
        return None
    if isinstance(requests, list) and not 0 <= min_images <= len(requests):
        problems.append(
            f"{prefix}.inputs.minImages: {min_images} must be between 0 and "
            f"the number of requests ({len(requests)})"
        )
    return min_images


class _Market(NamedTuple):
    """What the step, not the template, sets in every request."""

    symbol: str
    timeframe: str
    default_timezone: str


def _call(
    run_id: str, step_id: str, template_id: str, template: Mapping[str, Any], market: _Market
) -> ChartCall:
    chart_img_symbol = resolve_chart_img_symbol(template["chartImgSymbolTemplate"], market.symbol)
    layout = template.get("layout")
    target = None
    if layout is None:
        body = build_request_body(
            template["request"], chart_img_symbol, market.timeframe, market.default_timezone
        )
    else:
        body = build_layout_body(layout.get("request", {}), chart_img_symbol, market.timeframe)
        target = LayoutTarget(layout["layoutId"], layout.get("private") is True, layout.get("session"))
    return ChartCall(
        run_id=run_id,
        step_id=step_id,
        chart_template_id=template_id,
        chart_img_symbol=chart_img_symbol,
        interval=market.timeframe,
        body=body,
        fixture_key=fixture_key(chart_img_symbol, market.timeframe, template_id),
        layout=target,
    )


def _is_plain_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _failed(problems: list[str]) -> StepError:
    kept = [p if len(p) <= MAX_PROBLEM_CHARS else p[: MAX_PROBLEM_CHARS - 1] + "…" for p in problems]
    head = kept[0] if len(kept) == 1 else f"{kept[0]} (and {len(kept) - 1} more)"
    details: dict[str, Any] = {"problems": kept[:MAX_PROBLEMS_KEPT]}
    if len(kept) > MAX_PROBLEMS_KEPT:
        details["problemCount"] = len(kept)
    return StepError(ErrorCode.VALIDATION_FAILED, f"invalid step inputs: {head}", details)
