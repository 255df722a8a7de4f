"""A local flow_run JSON file, read and checked for the commands that take one (run-local,
advance, submit, stack up); what is wrong with it is a `UsageError` (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from worker_chart_export.core.documents import FlowRunDocument, as_flow_run
from worker_chart_export.core.exceptions import UsageError

_SHOWN_PROBLEMS = 3


def read_flow_run(path: Path, flag: str = "--flow-run-path") -> FlowRunDocument:
    """The flow_run at `path`, checked enough to be run: an object with a runId and steps.
    Problems name `flag`, the option the path came from."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise UsageError(f"{flag} {path}: a flow_run must be a JSON object")
    if not isinstance(document.get("runId"), str) or not document["runId"]:
        raise UsageError(f"{flag} {path}: the flow_run has no runId")
    if not isinstance(document.get("steps"), dict):
        raise UsageError(f"{flag} {path}: steps must be a map of stepId to step")
    return as_flow_run(document)


def read_valid_flow_run(
    path: Path, flag: str = "--flow-run-path", *, run_id: str | None = None
) -> FlowRunDocument:
    """The flow_run at `path` (its runId replaced by `run_id` when given), checked against
    contracts/flow_run.schema.json: what a producer may write into Firestore."""
    from worker_chart_export.bundled.contracts import FLOW_RUN, schema_errors

    document = read_flow_run(path, flag)
    if run_id is not None:
        document["runId"] = run_id
    problems = schema_errors(FLOW_RUN, document)
    if problems:
        shown = "; ".join(problems[:_SHOWN_PROBLEMS])
        more = f" (and {len(problems) - _SHOWN_PROBLEMS} more)" if len(problems) > _SHOWN_PROBLEMS else ""
        raise UsageError(f"{flag} {path}: not a valid flow_run ({FLOW_RUN}): {shown}{more}")
    return document
