"""A ChartsOutputsManifest (as core/step/manifest_reader.py read it) and its PNG bytes -> one
static HTML page.

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
from dataclasses import dataclass, fields, is_dataclass, replace
from enum import Enum
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.png import check_png
from worker_chart_export.core.redaction import NO_SECRETS, Redaction
from worker_chart_export.core.step.success import step_status
from worker_chart_export.tools.view.model import ChartImage, StepState
from worker_chart_export.tools.view.style import CSS

if TYPE_CHECKING:
    from jinja2 import Template

    from worker_chart_export.core.step.manifest import ManifestFailure
    from worker_chart_export.core.step.manifest_reader import ReadItem, ReadManifest

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
    """Why this item's image cannot be shown, or None when its bytes are a whole PNG (the
    worker's own check, core/png.py)."""
    if image is None:
        return "no image was read for this item"
    if image.data is None:
        return image.problem or "the image could not be read"
    check = check_png(image.data)
    if not check.whole:
        return f"{image.where} is not a whole PNG ({len(image.data)} bytes: {check.problem})"
    return None


def page_problems(manifest: ReadManifest, images: Mapping[str, ChartImage]) -> list[str]:
    """Missing or unreadable PNGs, and requests the manifest neither rendered nor reports failed."""
    problems = []
    for item in manifest.items:
        reason = image_problem(images.get(item.png_gcs_uri))
        if reason:
            problems.append(f"{item.chart_template_id}: {reason}")
    accounted = {i.chart_template_id for i in manifest.items}
    accounted |= {f.request["chartTemplateId"] for f in manifest.failures}
    for request in manifest.requested:
        if request["chartTemplateId"] not in accounted:
            problems.append(f"{request['chartTemplateId']}: requested, but neither in items nor in failures")
    return problems


def _status(manifest: ReadManifest, state: StepState | None) -> _Status:
    derived = step_status(len(manifest.items), manifest.min_images).value
    rule = f"{len(manifest.items)} image(s), minImages {manifest.min_images}"
    if state is None:
        return _Status(derived, f"from the manifest: {rule}", _css_class(derived), None, "")
    note = f"from {state.source}"
    if state.status != derived:
        note += f"; the manifest's rule gives {derived} ({rule})"
    return _Status(state.status, note, _css_class(state.status), state.error_code, state.error_message or "")


def _css_class(status: str) -> str:
    return {"SUCCEEDED": "ok", "FAILED": "bad"}.get(status, "neutral")


def _facts(manifest: ReadManifest) -> list[str]:
    facts = [manifest.symbol, manifest.timeframe, f"created {rfc3339_utc(manifest.created_at)}"]
    if manifest.charts_api_mode is not None:
        facts.append(f"{manifest.charts_api_mode} mode")
    return facts


def _stats(manifest: ReadManifest) -> list[_Stat]:
    return [
        _Stat("requested", len(manifest.requested), "stat-requested"),
        _Stat("images", len(manifest.items), "stat-items"),
        _Stat("failures", len(manifest.failures), "stat-failures"),
        _Stat("minImages", manifest.min_images, "stat-min-images"),
    ]


def _figure(item: ReadItem, manifest: ReadManifest, image: ChartImage | None) -> _Figure:
    reason = image_problem(image)
    png_base64 = None
    if reason is None and image is not None and image.data is not None:
        png_base64 = base64.b64encode(image.data).decode("ascii")
    symbol = manifest.symbol
    if item.chart_img_symbol is not None:
        symbol = f"{symbol} ({item.chart_img_symbol})"
    facts = (
        ("kind", item.kind),
        ("symbol", symbol),
        ("timeframe", manifest.timeframe),
        ("generatedAt", rfc3339_utc(item.generated_at)),
    )
    return _Figure(item.chart_template_id, item.png_gcs_uri, item.label or None, facts, png_base64, reason)


def _details(details: object) -> str:
    if not details:
        return ""
    text = json.dumps(details, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > _DETAILS_MAX_CHARS:
        text = text[:_DETAILS_MAX_CHARS] + " …"
    return text


def _failures(failures: Sequence[ManifestFailure]) -> list[_Failure]:
    return [
        _Failure(f.request["chartTemplateId"], f.error.code.value, f.error.message, _details(f.error.details))
        for f in failures
    ]


def _redacted(value: Any, redaction: Redaction) -> Any:
    """`value` with every text in it redacted: a str; in a dataclass (a read manifest, its items
    and failures, a ChartImage, a StepState) each field, nested ones and tuples of them too; the
    JSON values a manifest holds (requests, meta, details). Bytes, moments, numbers and enum
    members (an error's code) are kept."""
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return redaction.text(value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: _redacted(getattr(value, f.name), redaction) for f in fields(value)})
    if isinstance(value, tuple):
        return tuple(_redacted(v, redaction) for v in value)
    if isinstance(value, Mapping | list):
        return redaction.value(value)
    return value


def render_page(
    manifest: ReadManifest,
    images: Mapping[str, ChartImage],
    *,
    source: str,
    state: StepState | None = None,
    redaction: Redaction = NO_SECRETS,
) -> Page:
    """The page for a manifest the reader read; `images` is keyed by `png_gcs_uri`."""
    from markupsafe import Markup  # comes with jinja2

    if redaction:
        manifest, source = _redacted(manifest, redaction), redaction.text(source)
        images = {redaction.text(uri): _redacted(image, redaction) for uri, image in images.items()}
        state = _redacted(state, redaction)

    problems = page_problems(manifest, images)
    html = _template().render(
        csp=_CSP,
        css=Markup(CSS),  # our own stylesheet, not input: its quotes must stay quotes
        step_id=manifest.step_id,
        run_id=manifest.run_id,
        facts=_facts(manifest),
        status=_status(manifest, state),
        stats=_stats(manifest),
        problems=problems,
        figures=[_figure(i, manifest, images.get(i.png_gcs_uri)) for i in manifest.items],
        failures=_failures(manifest.failures),
        source=source,
        schema_version=manifest.schema_version,
    )
    return Page(html=html + "\n", problems=tuple(problems))
