"""`worker-chart-export templates sync`: load chart-templates/*.json into Firestore.

All or nothing: every file is validated (core.templates.template_check.template_problems, the one rule
set step validation applies too: contracts/chart_template.schema.json, CHART-IMG's rules under
the best plan among the configured accounts' and its documented lists; and the file name must
be `<id>.json`) before anything is written; one bad file means no writes at all. A template
only some accounts' plans allow is said so: its charts go only to those accounts. A `*.json`
that is no chart template (not a JSON object, or an object with none of a template's fields:
an accounts file kept beside the templates, say) is skipped with one line naming it, never
its content; a problem names the file and the JSON path, and a schema problem never quotes
the value.
Valid templates are compared with the stored documents and only the differing ones are
written, as full overwrites, so a re-run is a no-op and the report says what changed.
From the CLI, `--dry-run` only validates, offline; Firestore problems are one line (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from worker_chart_export.core.chart_img.plans import DEFAULT_PLAN, DEFAULT_PLANS, AccountPlans
from worker_chart_export.core.naming import CHART_TEMPLATES_COLLECTION
from worker_chart_export.core.templates.template_check import template_problems

if TYPE_CHECKING:
    from google.cloud import firestore

EXIT_OK = 0
EXIT_INVALID = 1  # some template files are invalid: nothing was written


class SyncAction(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class SyncProblem:
    file: str  # file name inside the directory
    path: str  # JSON path of the offending field, `$` for the whole document
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}"


@dataclass(frozen=True)
class SyncReport:
    directory: Path
    collection: str
    dry_run: bool
    problems: tuple[SyncProblem, ...] = ()
    actions: Mapping[str, SyncAction] = field(default_factory=dict)  # template id -> action
    not_in_directory: tuple[str, ...] = ()  # stored ids without a file: reported, never deleted
    plan: str = DEFAULT_PLAN  # the CHART-IMG plan whose limits the templates were checked against
    # template id -> who can serve it, for those only some configured accounts' plans allow
    only_some: Mapping[str, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # `<file>: <why>` for each *.json that is no chart template

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def written(self) -> tuple[str, ...]:
        """Ids written (or, with dry_run, that would be written)."""
        return tuple(i for i, a in self.actions.items() if a is not SyncAction.UNCHANGED)

    def to_text(self) -> str:
        if self.problems:
            lines = [
                f"templates sync: {len(self.problems)} problem(s) in {self.directory} "
                f"(checked against the {self.plan} plan); nothing was written:"
            ]
            lines += [f"  {p}" for p in self.problems]
            return "\n".join(lines + skipped_lines(self.skipped))
        prefix = "would be " if self.dry_run else ""
        lines = [
            f"templates sync{' (dry run)' if self.dry_run else ''}: {self.directory} -> "
            f"Firestore {self.collection}/ (checked against the {self.plan} plan)"
        ]
        for template_id, action in sorted(self.actions.items()):
            shown = action.value if action is SyncAction.UNCHANGED else prefix + action.value
            lines.append(f"  {template_id}: {shown}{_served(self.only_some, template_id)}")
        for template_id in self.not_in_directory:
            lines.append(f"  {template_id}: in Firestore only (left untouched)")
        lines += skipped_lines(self.skipped)
        counts = {a: sum(1 for x in self.actions.values() if x is a) for a in SyncAction}
        lines.append(
            f"{len(self.actions)} template(s): {counts[SyncAction.CREATED]} {prefix}created, "
            f"{counts[SyncAction.UPDATED]} {prefix}updated, {counts[SyncAction.UNCHANGED]} unchanged"
        )
        return "\n".join(lines)


def _served(only_some: Mapping[str, str], template_id: str) -> str:
    return f" ({only_some[template_id]})" if template_id in only_some else ""


def only_some_serve(templates: Mapping[str, Any], plans: AccountPlans) -> dict[str, str]:
    """For each valid template that some configured accounts' plans do not allow: which
    accounts can serve it and which cannot (its calls go only to the first)."""
    said: dict[str, str] = {}
    for template_id, document in templates.items():
        serving = {plan.name for plan in plans.plans if not template_problems(document, plan)}
        if len(serving) < len(plans.plans):
            can = [f"{a} {p.name}" for a, p in plans.by_account if p.name in serving]
            cannot = [f"{a} {p.name}" for a, p in plans.by_account if p.name not in serving]
            said[template_id] = f"only {', '.join(can)} can serve it; not {', '.join(cannot)}"
    return said


def skipped_lines(skipped: tuple[str, ...]) -> list[str]:
    return [f"  {line}" for line in skipped]


# a template's own fields (contracts/chart_template.schema.json): a JSON object with none of
# them is some other file kept in the folder
_TEMPLATE_FIELDS = frozenset({"id", "description", "chartImgSymbolTemplate", "request", "layout"})


class LoadedTemplates(NamedTuple):
    templates: dict[str, dict[str, Any]]  # the valid ones, by id
    problems: list[SyncProblem]
    skipped: tuple[str, ...]  # `<file>: <why>`, for each *.json that is no chart template


def not_a_template(document: Any) -> str | None:
    """Why a JSON document is no chart template at all (then skipped), or None."""
    if not isinstance(document, dict):
        return f"skipped: not a chart template ({_json_kind(document)}, not an object)"
    if not _TEMPLATE_FIELDS & document.keys():
        return f"skipped: not a chart template (none of {', '.join(sorted(_TEMPLATE_FIELDS))})"
    return None


def _json_kind(value: Any) -> str:
    kinds = {list: "a JSON array", str: "a JSON string", bool: "a JSON boolean", type(None): "JSON null"}
    return kinds.get(type(value), "a JSON number")


def load_templates(directory: Path, plans: AccountPlans = DEFAULT_PLANS) -> LoadedTemplates:
    """The valid templates by id (checked under the best plan configured), every problem
    found, the files skipped. Checks all files, stops at none."""
    plan = plans.best
    if not directory.is_dir():
        return LoadedTemplates({}, [SyncProblem(str(directory), "$", "not a directory")], ())
    files = sorted(directory.glob("*.json"))
    templates: dict[str, dict[str, Any]] = {}
    problems: list[SyncProblem] = []
    skipped: list[str] = []
    for path in files:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(SyncProblem(path.name, "$", f"cannot be read as JSON: {_reason(exc)}"))
            continue
        why_not = not_a_template(document)
        if why_not is not None:
            skipped.append(f"{path.name}: {why_not}")
            continue
        found = sorted(
            (SyncProblem(path.name, f"${p.suffix}", p.message) for p in template_problems(document, plan)),
            key=lambda problem: problem.path,
        )
        problems += found
        template_id = document.get("id")
        if isinstance(template_id, str) and template_id != path.stem:
            problems.append(
                SyncProblem(path.name, "$.id", f"{template_id!r} does not match the file name {path.stem!r}")
            )
        if not found and isinstance(template_id, str):
            templates[template_id] = document
    if not templates and not problems:
        problems.append(SyncProblem(str(directory), "$", "no chart template among its *.json files"))
    return LoadedTemplates(templates, problems, tuple(skipped))


def _reason(exc: Exception) -> str:
    """What is wrong with an unreadable file, without its content (a JSON error's position,
    a decoding error's byte, an OS error's words)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    return str(getattr(exc, "strerror", None) or type(exc).__name__)


def sync_templates(
    directory: Path,
    client: firestore.Client,
    *,
    collection: str = CHART_TEMPLATES_COLLECTION,
    dry_run: bool = False,
    plans: AccountPlans = DEFAULT_PLANS,
) -> SyncReport:
    """Validate every file, then upsert the templates that differ from Firestore.

    Raises TransientStoreError when Firestore cannot be reached (nothing, or only whole
    batches, written: each batch commits atomically and a re-run finishes the job).
    """
    from worker_chart_export.bootstrap.commands import template_catalog

    templates, problems, skipped = load_templates(directory, plans)
    if problems:
        return SyncReport(
            directory, collection, dry_run, problems=tuple(problems), plan=plans.best.name, skipped=skipped
        )
    catalog = template_catalog(client, collection)
    stored, stored_ids = catalog.stored(list(templates))
    actions: dict[str, SyncAction] = {}
    for template_id, document in templates.items():
        if template_id not in stored:
            actions[template_id] = SyncAction.CREATED
        elif stored[template_id] != document:
            actions[template_id] = SyncAction.UPDATED
        else:
            actions[template_id] = SyncAction.UNCHANGED
    report = SyncReport(
        directory,
        collection,
        dry_run,
        actions=actions,
        not_in_directory=tuple(sorted(stored_ids - templates.keys())),
        plan=plans.best.name,
        skipped=skipped,
        only_some=only_some_serve(templates, plans),
    )
    if dry_run:
        return report
    catalog.write({template_id: templates[template_id] for template_id in report.written})
    return report


def run_templates_sync(
    directory: Path,
    project: str | None,
    dry_run: bool,
    *,
    emulator_host: str | None = None,
    plans: AccountPlans = DEFAULT_PLANS,
) -> tuple[int, str]:
    """For the CLI: (exit code, text to print). 0 ok, 1 invalid templates; Firestore unusable
    (no credentials, unreachable, refused): UsageError, one line (exit 2). A dry run only
    validates, offline: no credentials needed, no client created."""
    from worker_chart_export.bootstrap.commands import checked_firestore

    directory = Path(directory)
    templates, problems, skipped = load_templates(directory, plans)
    if problems:
        return EXIT_INVALID, SyncReport(
            directory,
            CHART_TEMPLATES_COLLECTION,
            dry_run,
            tuple(problems),
            plan=plans.best.name,
            skipped=skipped,
        ).to_text()
    if dry_run:
        return EXIT_OK, _validated_text(directory, templates, plans, skipped)
    with checked_firestore(project, emulator_host) as client:
        report = sync_templates(directory, client, plans=plans)
    return (EXIT_OK if report.ok else EXIT_INVALID), report.to_text()


def _validated_text(
    directory: Path, templates: Mapping[str, Any], plans: AccountPlans, skipped: tuple[str, ...]
) -> str:
    lines = [
        f"templates sync (dry run): {len(templates)} template(s) in {directory} are valid "
        f"(checked against the {plans.best.name} plan); Firestore was not contacted, nothing was written"
    ]
    only_some = only_some_serve(templates, plans)
    lines += [f"  {template_id}: valid{_served(only_some, template_id)}" for template_id in sorted(templates)]
    return "\n".join(lines + skipped_lines(skipped))
