"""Access to the JSON Schemas in contracts/ (shipped with the package), compiled once per process."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

# jsonschema ships no annotations and types-jsonschema is not in the locks
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from worker_chart_export.bundled import contracts_dir

CONTRACTS_DIR = contracts_dir()
FLOW_RUN = "flow_run.schema.json"
MANIFEST = "charts_outputs_manifest.schema.json"
CHART_TEMPLATE = "chart_template.schema.json"


@cache
def validator(schema_name: str, folder: Path = CONTRACTS_DIR) -> Draft202012Validator:
    schema = json.loads((folder / schema_name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_errors(schema_name: str, document: Any) -> list[str]:
    """Every violation as `path: message`, sorted by path; empty when the document is valid."""
    errors = sorted(validator(schema_name).iter_errors(document), key=lambda e: list(e.path))
    return [f"{e.json_path}: {e.message}" for e in errors]
