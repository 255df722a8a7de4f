"""A ChartsOutputsManifest read back (contract §6): its bytes in, typed values out, or an error
naming where they break the contract. The one reader, beside the writer (manifest.py).

Checked by the schema the writer is checked by (contracts/charts_outputs_manifest.schema.json),
plus what the schema cannot say: the format version this reader knows (SCHEMA_VERSION, the one
the writer writes) and date-times that are real moments. A manifest is untrusted input (an
older worker's, another tool's, a file cut short): nothing of it is used before it passed.

The values are read-only counterparts of the writer's: `ReadItem` holds what ManifestItem
writes and what the schema lets another writer add or leave out (label, any meta); failures
come back as the writer's ManifestFailure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.step.manifest import SCHEMA_VERSION, ManifestFailure

if TYPE_CHECKING:
    from worker_chart_export.core.documents import ChartRequestInput

SHOWN_PROBLEMS = 5  # an error lists this many problems, then counts the rest


@dataclass(frozen=True)
class ManifestProblem:
    path: str  # a JSON path into the manifest, `$` for the whole document
    message: str

    def __str__(self) -> str:
        return self.message if self.path == "$" else f"{self.path}: {self.message}"


class ManifestUnreadable(ValueError):
    """Not a manifest this reader reads: `where` it came from, and what is wrong, each problem
    at its JSON path. The message: `<where>: [<heading>: ]<problem>; <problem>...`."""

    def __init__(self, where: str, problems: Sequence[ManifestProblem], heading: str = "") -> None:
        self.where, self.problems = where, tuple(problems)
        shown = "; ".join(str(p) for p in self.problems[:SHOWN_PROBLEMS])
        more = len(self.problems) - SHOWN_PROBLEMS
        listed = shown + (f" (and {more} more)" if more > 0 else "")
        super().__init__(f"{where}: {heading}: {listed}" if heading else f"{where}: {listed}")

    @property
    def json_path(self) -> str:
        """Where the first problem is."""
        return self.problems[0].path


@dataclass(frozen=True)
class ReadItem:
    """One element of items[]: a PNG the step produced."""

    chart_template_id: str
    kind: str
    generated_at: datetime
    png_gcs_uri: str
    meta: Mapping[str, Any] = field(default_factory=dict)  # diagnostics, as written
    label: str | None = None
    signed_url: str | None = None  # reserved by the schema; this worker writes neither
    expires_at: datetime | None = None

    @property
    def chart_img_symbol(self) -> str | None:
        """The symbol CHART-IMG was sent (`meta.chartImgSymbol`), when the manifest says."""
        return _text(self.meta.get("chartImgSymbol"))

    @property
    def request_digest(self) -> str | None:
        """The digest of the body the PNG was rendered from (`meta.requestDigest`), when said."""
        return _text(self.meta.get("requestDigest"))

    @property
    def reused(self) -> bool:
        """An earlier execution of the step wrote this PNG (`meta.reused`)."""
        return self.meta.get("reused") is True


@dataclass(frozen=True)
class ReadManifest:
    """A whole manifest, every field of the schema typed; the optional ones None when absent."""

    schema_version: int
    run_id: str
    step_id: str
    created_at: datetime
    symbol: str
    timeframe: str
    min_images: int
    requested: tuple[ChartRequestInput, ...]
    items: tuple[ReadItem, ...]
    failures: tuple[ManifestFailure, ...]
    charts_api_mode: str | None = None
    outputs_prefix: str | None = None


def read_manifest(raw: bytes | str, where: str) -> ReadManifest:
    """A manifest's JSON text (UTF-8 bytes or str) -> its values; raises ManifestUnreadable
    naming `where` (a path or a gs:// URI, for the message) and each problem's JSON path."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _unreadable(where, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        document = json.loads(raw, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise _unreadable(where, _json_problem(raw, exc)) from None
    except ValueError as exc:  # NaN or Infinity: a Python extension, not JSON
        raise _unreadable(where, f"not JSON ({exc})") from None
    return manifest_of(document, where)


def manifest_of(document: object, where: str) -> ReadManifest:
    """An already parsed JSON document -> the manifest's values, checked as `read_manifest` does."""
    if not isinstance(document, dict):
        raise _unreadable(where, f"a manifest is a JSON object, found {_json_type(document)}")
    version = document.get("schemaVersion")
    if isinstance(version, int) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        age = "an older" if version < SCHEMA_VERSION else "a newer"
        message = f"format version {version}, this reader reads version {SCHEMA_VERSION} ({age} format)"
        raise ManifestUnreadable(
            where, [ManifestProblem("$.schemaVersion", message)], "not a manifest this reader reads"
        )
    problems = _schema_problems(document) or _date_time_problems(document)
    if problems:
        raise ManifestUnreadable(where, problems, "not a valid ChartsOutputsManifest")
    return ReadManifest(
        schema_version=document["schemaVersion"],
        run_id=document["runId"],
        step_id=document["stepId"],
        created_at=datetime.fromisoformat(document["createdAt"]),
        symbol=document["symbol"],
        timeframe=document["timeframe"],
        min_images=document["minImages"],
        requested=tuple(document["requested"]),
        items=tuple(_item(i) for i in document["items"]),
        failures=tuple(_failure(f) for f in document["failures"]),
        charts_api_mode=document.get("chartsApiMode"),
        outputs_prefix=document.get("outputsPrefix"),
    )


def _item(item: dict[str, Any]) -> ReadItem:
    expires_at = item.get("expires_at")
    return ReadItem(
        chart_template_id=item["chartTemplateId"],
        kind=item["kind"],
        generated_at=datetime.fromisoformat(item["generatedAt"]),
        png_gcs_uri=item["png_gcs_uri"],
        meta=item.get("meta", {}),
        label=item.get("label"),
        signed_url=item.get("signed_url"),
        expires_at=datetime.fromisoformat(expires_at) if expires_at is not None else None,
    )


def _failure(failure: dict[str, Any]) -> ManifestFailure:
    error = failure["error"]
    step_error = StepError(ErrorCode(error["code"]), error["message"], error.get("details", {}))
    return ManifestFailure(failure["request"], step_error)


def _schema_problems(document: dict[str, Any]) -> list[ManifestProblem]:
    from worker_chart_export.bundled.contracts import MANIFEST, validator  # jsonschema: only a reader pays

    # by path; at one path unexpected keys first: what tells another tool's document apart
    errors = sorted(
        validator(MANIFEST).iter_errors(document),
        key=lambda e: (list(e.path), e.validator != "additionalProperties"),
    )
    return [ManifestProblem(e.json_path, e.message) for e in errors]


def _date_time_problems(document: dict[str, Any]) -> list[ManifestProblem]:
    """The schema's pattern admits a 30 February or an hour 25 (its `format` is not checked
    without an RFC 3339 library): each date-time must also be a moment."""
    places = [("$.createdAt", document["createdAt"])]
    for n, item in enumerate(document["items"]):
        places.append((f"$.items[{n}].generatedAt", item["generatedAt"]))
        if "expires_at" in item:
            places.append((f"$.items[{n}].expires_at", item["expires_at"]))
    problems = []
    for path, text in places:
        try:
            datetime.fromisoformat(text)
        except ValueError as exc:
            problems.append(ManifestProblem(path, f"{text!r} is not a moment ({exc})"))
    return problems


def _json_problem(text: str, exc: json.JSONDecodeError) -> str:
    if not text.strip():
        return "empty, not JSON"
    what = f"{exc.msg}: line {exc.lineno} column {exc.colno}"
    if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
        return f"not JSON, it ends inside a value ({what}): a file cut short?"
    return f"not JSON ({what})"


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _unreadable(where: str, message: str) -> ManifestUnreadable:
    """The whole document is the problem: no manifest can be looked for in it."""
    return ManifestUnreadable(where, [ManifestProblem("$", message)])


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
