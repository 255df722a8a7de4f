"""The one rule set a chart template must pass, and a stored template's check, kept per version.

`template_problems` is the rule set: contracts/chart_template.schema.json, then CHART-IMG's
rules under the plan (`core.templates.template_rules`) and its documented lists
(`core.templates.documented_rules`), one message per field. `templates sync` calls it on every file;
step validation calls it through `StoredTemplate.problems`, once per stored version of a
template and plan, so a step on a template already seen costs no check at all.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from worker_chart_export.core.chart_img.plans import Plan
from worker_chart_export.core.templates.documented_rules import (
    documented_layout_problems,
    documented_problems,
)
from worker_chart_export.core.templates.template_rules import Path, TemplateProblem, rule_problems, shown
from worker_chart_export.core.types import JsonDict

TemplateCheck = Callable[[Any, Plan], list[TemplateProblem]]


def template_problems(document: Any, plan: Plan) -> list[TemplateProblem]:
    """Every reason CHART-IMG (or the worker) would refuse `document` under `plan`: the
    rules' problems in their order, then the schema's. A schema error about a field the
    rules already named is left out: the rules' message is the one that says which plan or
    which documented list refuses it."""
    ruled: list[TemplateProblem] = []
    if isinstance(document, Mapping):
        ruled += rule_problems(document, plan)
        request, layout = document.get("request"), document.get("layout")
        if isinstance(request, Mapping):
            ruled += documented_problems(request, plan)
        if isinstance(layout, Mapping) and isinstance(layout.get("request"), Mapping):
            ruled += documented_layout_problems(layout["request"], plan)
        if not _is_plain_json(document):
            ruled.append(TemplateProblem((), "holds a value JSON cannot carry (NaN, Infinity, bytes, ...)"))
    ruled_paths = {p.path for p in ruled}
    return ruled + [p for p in _schema_problems(document, ruled_paths) if p.path not in ruled_paths]


def _schema_problems(document: Any, ruled: set[Path]) -> list[TemplateProblem]:
    from worker_chart_export.bundled.contracts import CHART_TEMPLATE, validator

    problems: list[TemplateProblem] = []
    for error in validator(CHART_TEMPLATE).iter_errors(document):
        path: Path = tuple(error.absolute_path)
        if error.validator == "required":
            missing = [k for k in error.validator_value if k not in error.instance]
            problems += [TemplateProblem((*path, k), "is required") for k in missing]
        elif error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            allowed = list(error.schema.get("properties", {}))
            extra = [k for k in error.instance if k not in allowed]
            problems += [
                TemplateProblem((*path, k), f"is not allowed here (allowed: {', '.join(allowed)})")
                for k in extra
                if not _under(ruled, (*path, k))
            ]
        elif error.validator == "not" and any(len(r) > len(path) and r[: len(path)] == path for r in ruled):
            continue  # `request` sets symbol or interval: the rules name the field
        else:
            problems.append(TemplateProblem(path, schema_message(error)))
    return problems


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def schema_message(error: Any) -> str:
    """A jsonschema error in words that never carry the instance (a file that is not a
    template may hold a key: the message names the path and the rule, not the content)."""
    instance, message = error.instance, str(error.message)
    if error.validator == "type":
        kind = _JSON_KINDS.get(type(instance), "a number")
        return f"is {kind}, not of type {error.validator_value!r}"
    shown = repr(instance)
    rest = message.removeprefix(shown).strip() if message.startswith(shown) else ""
    if rest and shown not in rest:
        return rest
    return f"does not satisfy the schema's {error.validator!r} rule"


def _under(paths: set[Path], prefix: Path) -> bool:
    return any(p[: len(prefix)] == prefix for p in paths)


def _is_plain_json(document: Mapping[str, Any]) -> bool:
    try:
        json.dumps(document, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


class StoredTemplate:
    """One stored version of `chart_templates/{id}`: its document and the store's revision
    (Firestore's update_time, a file's modification stamp). Its check is remembered per
    plan: a source that keeps this object while the revision stays the same never checks a
    version twice. Two threads asking at once may both check; both get the same answer."""

    def __init__(
        self,
        template_id: str,
        document: JsonDict,
        revision: object = None,
        *,
        check: TemplateCheck = template_problems,
    ) -> None:
        self.template_id = template_id
        self.revision = revision
        self._document = document
        self._check = check
        self._problems: dict[Plan, tuple[TemplateProblem, ...]] = {}

    @property
    def document(self) -> JsonDict:
        """A copy: nothing a caller does to it can change what was checked."""
        return copy.deepcopy(self._document)

    @property
    def document_keys(self) -> frozenset[str]:
        """The stored document's top-level fields (which kind of template: request or layout)."""
        return frozenset(self._document)

    @property
    def symbol_template(self) -> Any:
        """chartImgSymbolTemplate as stored (a str, when the template is valid)."""
        return self._document.get("chartImgSymbolTemplate")

    def problems(self, plan: Plan) -> tuple[TemplateProblem, ...]:
        found = self._problems.get(plan)
        if found is None:
            found = (*self._check(self._document, plan), *self._id_problems())
            self._problems[plan] = found
        return found

    def _id_problems(self) -> tuple[TemplateProblem, ...]:
        stored_id = self._document.get("id")
        if not isinstance(stored_id, str) or stored_id == self.template_id:
            return ()  # missing or not a string: the schema says so
        return (
            TemplateProblem(
                ("id",), f"{shown(stored_id)} differs from the id it is stored as, {self.template_id!r}"
            ),
        )
