"""A ChartsOutputsManifest (already validated) and its PNG bytes -> one static HTML page.

Pure: no I/O, no clock, so the same inputs give the same page. Everything taken from the
manifest, the state file or a reader's problem text is untrusted and goes through `_esc`. The
page is self-contained: CSS inline, PNGs embedded as data: URIs, and a Content-Security-Policy
that forbids any fetch, so it works offline and cannot call out even if a value slipped through.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from worker_chart_export.core.outcome import step_status
from worker_chart_export.tools.view.model import ChartImage, StepState
from worker_chart_export.tools.view.style import CSS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DETAILS_MAX_CHARS = 600
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


@dataclass(frozen=True)
class Page:
    html: str
    problems: tuple[str, ...]  # what the page flags (missing PNGs, inconsistencies), for stderr too


def _esc(value: object) -> str:
    return escape(str(value), quote=True)


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


def _status_block(manifest: Mapping[str, Any], state: StepState | None) -> str:
    derived = step_status(len(manifest["items"]), manifest["minImages"]).value
    rule = f"{len(manifest['items'])} image(s), minImages {manifest['minImages']}"
    if state is None:
        status, note = derived, f"from the manifest: {rule}"
    else:
        status, note = state.status, f"from {state.source}"
        if state.status != derived:
            note += f"; the manifest's rule gives {derived} ({rule})"
    error = ""
    if state is not None and state.error_code:
        error = (
            f'<p class="step-error"><span class="code">{_esc(state.error_code)}</span> '
            f"{_esc(state.error_message or '')}</p>"
        )
    css_class = {"SUCCEEDED": "ok", "FAILED": "bad"}.get(status, "neutral")
    return (
        f'<div class="status"><span class="pill {css_class}" id="step-status">{_esc(status)}</span>'
        f'<span class="status-note">{_esc(note)}</span></div>{error}'
    )


def _stat(label: str, value: object, stat_id: str) -> str:
    return (
        f'<div class="stat"><div class="stat-value" id="{stat_id}">{_esc(value)}</div>'
        f"<div>{_esc(label)}</div></div>"
    )


def _header(manifest: Mapping[str, Any], state: StepState | None) -> str:
    facts = [manifest["symbol"], manifest["timeframe"], f"created {manifest['createdAt']}"]
    if "chartsApiMode" in manifest:
        facts.append(f"{manifest['chartsApiMode']} mode")
    stats = "".join(
        [
            _stat("requested", len(manifest["requested"]), "stat-requested"),
            _stat("images", len(manifest["items"]), "stat-items"),
            _stat("failures", len(manifest["failures"]), "stat-failures"),
            _stat("minImages", manifest["minImages"], "stat-min-images"),
        ]
    )
    return (
        f'<header><div class="eyebrow">CHART_EXPORT step</div>'
        f'<h1><span class="step">{_esc(manifest["stepId"])}</span> '
        f'<span class="run">{_esc(manifest["runId"])}</span></h1>'
        f'<p class="facts">{" · ".join(_esc(f) for f in facts)}</p>'
        f'{_status_block(manifest, state)}<div class="stats">{stats}</div></header>'
    )


def _figure(item: Mapping[str, Any], manifest: Mapping[str, Any], image: ChartImage | None) -> str:
    template = _esc(item["chartTemplateId"])
    reason = image_problem(image)
    if reason is None and image is not None and image.data is not None:
        data = base64.b64encode(image.data).decode("ascii")
        visual = f'<img src="data:image/png;base64,{data}" alt="chart {template}">'
    else:
        visual = (
            '<div class="placeholder" role="img" aria-label="image missing">'
            f"<strong>Image unavailable</strong><span>{_esc(reason)}</span></div>"
        )
    symbol = manifest["symbol"]
    meta = item.get("meta") or {}
    if isinstance(meta.get("chartImgSymbol"), str):
        symbol = f"{symbol} ({meta['chartImgSymbol']})"
    rows = [
        ("kind", item["kind"]),
        ("symbol", symbol),
        ("timeframe", manifest["timeframe"]),
        ("generatedAt", item["generatedAt"]),
    ]
    facts = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in rows)
    label = f'<div class="label">{_esc(item["label"])}</div>' if item.get("label") else ""
    return (
        f'<figure class="chart" data-template="{template}">{visual}<figcaption>'
        f'<div class="template">{template}</div>{label}<dl>{facts}</dl>'
        f'<div class="uri">{_esc(item["png_gcs_uri"])}</div></figcaption></figure>'
    )


def _details(details: object) -> str:
    if not details:
        return ""
    text = json.dumps(details, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > _DETAILS_MAX_CHARS:
        text = text[:_DETAILS_MAX_CHARS] + " …"
    return f"<code>{_esc(text)}</code>"


def _failures(failures: Sequence[Mapping[str, Any]]) -> str:
    if not failures:
        return '<p class="empty">No failures: every requested chart was rendered.</p>'
    rows = "".join(
        f'<tr><td class="template">{_esc(f["request"]["chartTemplateId"])}</td>'
        f'<td><span class="code">{_esc(f["error"]["code"])}</span></td>'
        f'<td class="message">{_esc(f["error"]["message"])}</td>'
        f'<td class="details">{_details(f["error"].get("details"))}</td></tr>'
        for f in failures
    )
    return (
        '<table class="failures" id="failures"><thead><tr><th>template</th><th>code</th>'
        f"<th>message</th><th>details</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def render_page(
    manifest: Mapping[str, Any],
    images: Mapping[str, ChartImage],
    *,
    source: str,
    state: StepState | None = None,
) -> Page:
    """The page for a schema-valid manifest; `images` is keyed by `png_gcs_uri`."""
    problems = page_problems(manifest, images)
    problems_html = ""
    if problems:
        items = "".join(f"<li>{_esc(p)}</li>" for p in problems)
        problems_html = f'<section class="problems" id="problems"><h2>Problems</h2><ul>{items}</ul></section>'
    figures = "".join(_figure(i, manifest, images.get(i["png_gcs_uri"])) for i in manifest["items"])
    if not figures:
        figures = '<p class="empty">No images were produced.</p>'
    title = f"{manifest['stepId']} · {manifest['runId']}"
    html = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_esc(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body><main>"
        f"{_header(manifest, state)}{problems_html}"
        f'<section><h2>Charts <span class="count">{len(manifest["items"])}</span></h2>'
        f'<div class="grid">{figures}</div></section>'
        f'<section><h2>Failures <span class="count">{len(manifest["failures"])}</span></h2>'
        f"{_failures(manifest['failures'])}</section>"
        f'<footer>Manifest: <span class="uri">{_esc(source)}</span> · '
        f"schemaVersion {_esc(manifest['schemaVersion'])}</footer>"
        "</main></body></html>\n"
    )
    return Page(html=html, problems=tuple(problems))
