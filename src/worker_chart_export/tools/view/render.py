"""A ChartsOutputsManifest (already validated) and its PNG bytes -> one static HTML page.

Pure: no I/O beyond reading the packaged template, no clock, so the same inputs give the same
page. The functions here turn the manifest into plain values; `page.html.j2` (package data)
lays them out, with jinja2's autoescape on: everything taken from the manifest, the state file
or a reader's problem text is untrusted and is escaped there. The page is self-contained: CSS
inline, PNGs embedded as data: URIs, and a Content-Security-Policy that forbids any fetch, so it
works offline and cannot call out even if a value slipped through. Every text taken from the
inputs is redacted first (`redaction`: the keys the process holds, in every form), before it is
escaped: a manifest written by an older worker, or a state file, may hold a key.

jinja2 is imported when a page is rendered, not when the view is imported: the CLI that serves
the function imports this package, and its start-up should not pay for a template.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.redaction import NO_SECRETS, Redaction
from worker_chart_export.core.step.success import step_status
from worker_chart_export.tools.view.model import ChartImage, StepState
from worker_chart_export.tools.view.style import CSS

if TYPE_CHECKING:
    from jinja2 import Template

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PACKAGE, TEMPLATE_NAME = "worker_chart_export.tools.view", "page.html.j2"
_DETAILS_MAX_CHARS = 600
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


@dataclass(frozen=True)
class Page:
    html: str
    problems: tuple[str, ...]  # what the page flags (missing PNGs, inconsistencies), for stderr too


@dataclass(frozen=True)
class _Status:
    status: str
    note: str
    css_class: str
    error_code: str | None  # the step's error, shown when the state file records one
    error_message: str


@dataclass(frozen=True)
class _Stat:
    label: str
    value: object
    element_id: str


@dataclass(frozen=True)
class _Figure:
    template: str
    uri: str
    label: str | None
    facts: tuple[tuple[str, object], ...]
    png_base64: str | None  # None: `problem` says why the image is not shown
    problem: str | None


@dataclass(frozen=True)
class _Failure:
    template: str
    code: str
    message: str
    details: str  # "" when the failure has none


@cache
def _template() -> Template:
    """The packaged template, compiled once per process, its layout whitespace dropped."""
    from jinja2 import Environment, StrictUndefined

    source = resources.files(_PACKAGE).joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    compact = "".join(line.strip() for line in source.splitlines())
    return Environment(autoescape=True, undefined=StrictUndefined).from_string(compact)


def image_problem(image: ChartImage | None) -> str | None:
    """Why this item's image cannot be shown, or None when its bytes are a PNG."""
    if image is None:
        return "no image was read for this item"
    if image.data is None:
        return image.problem or "the image could not be read"
    if not image.data.startswith(PNG_SIGNATURE):
        return f"{image.where} is not a PNG ({len(image.data)} bytes without the PNG signature)"
    return None


def page_problems(manifest: Mapping[str, Any], images: Mapping[str, ChartImage]) -> list[str]:
    """Missing or unreadable PNGs, and requests the manifest neither rendered nor reports failed."""
    problems = []
    for item in manifest["items"]:
        reason = image_problem(images.get(item["png_gcs_uri"]))
        if reason:
            problems.append(f"{item['chartTemplateId']}: {reason}")
    accounted = {i["chartTemplateId"] for i in manifest["items"]}
    accounted |= {f["request"]["chartTemplateId"] for f in manifest["failures"]}
    for request in manifest["requested"]:
        if request["chartTemplateId"] not in accounted:
            problems.append(f"{request['chartTemplateId']}: requested, but neither in items nor in failures")
    return problems


def _status(manifest: Mapping[str, Any], state: StepState | None) -> _Status:
    derived = step_status(len(manifest["items"]), manifest["minImages"]).value
    rule = f"{len(manifest['items'])} image(s), minImages {manifest['minImages']}"
    if state is None:
        return _Status(derived, f"from the manifest: {rule}", _css_class(derived), None, "")
    note = f"from {state.source}"
    if state.status != derived:
        note += f"; the manifest's rule gives {derived} ({rule})"
    return _Status(state.status, note, _css_class(state.status), state.error_code, state.error_message or "")


def _css_class(status: str) -> str:
    return {"SUCCEEDED": "ok", "FAILED": "bad"}.get(status, "neutral")


def _facts(manifest: Mapping[str, Any]) -> list[str]:
    facts = [manifest["symbol"], manifest["timeframe"], f"created {manifest['createdAt']}"]
    if "chartsApiMode" in manifest:
        facts.append(f"{manifest['chartsApiMode']} mode")
    return facts


def _stats(manifest: Mapping[str, Any]) -> list[_Stat]:
    return [
        _Stat("requested", len(manifest["requested"]), "stat-requested"),
        _Stat("images", len(manifest["items"]), "stat-items"),
        _Stat("failures", len(manifest["failures"]), "stat-failures"),
        _Stat("minImages", manifest["minImages"], "stat-min-images"),
    ]


def _figure(item: Mapping[str, Any], manifest: Mapping[str, Any], image: ChartImage | None) -> _Figure:
    reason = image_problem(image)
    png_base64 = None
    if reason is None and image is not None and image.data is not None:
        png_base64 = base64.b64encode(image.data).decode("ascii")
    symbol = manifest["symbol"]
    meta = item.get("meta") or {}
    if isinstance(meta.get("chartImgSymbol"), str):
        symbol = f"{symbol} ({meta['chartImgSymbol']})"
    facts = (
        ("kind", item["kind"]),
        ("symbol", symbol),
        ("timeframe", manifest["timeframe"]),
        ("generatedAt", item["generatedAt"]),
    )
    return _Figure(
        item["chartTemplateId"], item["png_gcs_uri"], item.get("label") or None, facts, png_base64, reason
    )


def _details(details: object) -> str:
    if not details:
        return ""
    text = json.dumps(details, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > _DETAILS_MAX_CHARS:
        text = text[:_DETAILS_MAX_CHARS] + " …"
    return text


def _failures(failures: Sequence[Mapping[str, Any]]) -> list[_Failure]:
    return [
        _Failure(
            f["request"]["chartTemplateId"],
            f["error"]["code"],
            f["error"]["message"],
            _details(f["error"].get("details")),
        )
        for f in failures
    ]


def _texts_redacted(value: Any, redaction: Redaction) -> Any:
    """A ChartImage or StepState with each of its text fields redacted (bytes kept)."""
    changes = {
        f.name: redaction.text(v) for f in fields(value) if isinstance(v := getattr(value, f.name), str)
    }
    return replace(value, **changes)


def render_page(
    manifest: Mapping[str, Any],
    images: Mapping[str, ChartImage],
    *,
    source: str,
    state: StepState | None = None,
    redaction: Redaction = NO_SECRETS,
) -> Page:
    """The page for a schema-valid manifest; `images` is keyed by `png_gcs_uri`."""
    from markupsafe import Markup  # comes with jinja2

    if redaction:
        manifest, source = redaction.value(manifest), redaction.text(source)
        images = {redaction.text(uri): _texts_redacted(image, redaction) for uri, image in images.items()}
        state = None if state is None else _texts_redacted(state, redaction)

    problems = page_problems(manifest, images)
    html = _template().render(
        csp=_CSP,
        css=Markup(CSS),  # our own stylesheet, not input: its quotes must stay quotes
        step_id=manifest["stepId"],
        run_id=manifest["runId"],
        facts=_facts(manifest),
        status=_status(manifest, state),
        stats=_stats(manifest),
        problems=problems,
        figures=[_figure(i, manifest, images.get(i["png_gcs_uri"])) for i in manifest["items"]],
        failures=_failures(manifest["failures"]),
        source=source,
        schema_version=manifest["schemaVersion"],
    )
    return Page(html=html + "\n", problems=tuple(problems))
