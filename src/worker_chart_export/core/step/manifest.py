"""ChartsOutputsManifest (contract §6), built from plain values and checked against our schema."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker_chart_export.core.error_codes import StepError
from worker_chart_export.core.exceptions import InvalidManifestError
from worker_chart_export.core.naming import rfc3339_utc
from worker_chart_export.core.templates.chart_request import request_digest
from worker_chart_export.core.types import ChartCall, ChartEndpoint

if TYPE_CHECKING:
    from worker_chart_export.core.documents import ChartRequestInput

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ManifestItem:
    chart_template_id: str
    kind: str
    generated_at: datetime
    png_gcs_uri: str
    chart_img_symbol: str
    # core.templates.chart_request.request_digest of the request the PNG was rendered from (also its metadata)
    request_digest: str
    # an earlier execution of the step wrote this PNG (core/step/reuse.py): listed, not rendered
    reused: bool = False
    # which CHART-IMG endpoint drew it (core.types.ChartEndpoint), and a layout chart's layout
    endpoint: str = ChartEndpoint.ADVANCED_CHART.value
    layout_id: str | None = None

    @classmethod
    def of_call(
        cls, call: ChartCall, kind: str, generated_at: datetime, uri: str, *, reused: bool = False
    ) -> ManifestItem:
        """The item of `call`'s PNG: its template, symbol, request digest, endpoint and layout."""
        return cls(
            call.chart_template_id,
            kind,
            generated_at,
            uri,
            call.chart_img_symbol,
            request_digest(call),
            reused=reused,
            endpoint=call.endpoint.value,
            layout_id=call.layout.layout_id if call.layout is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "chartImgSymbol": self.chart_img_symbol,
            "requestDigest": self.request_digest,
            "endpoint": self.endpoint,
        }
        if self.layout_id is not None:
            meta["layoutId"] = self.layout_id
        if self.reused:
            meta["reused"] = True
        return {
            "chartTemplateId": self.chart_template_id,
            "kind": self.kind,
            "generatedAt": rfc3339_utc(self.generated_at),
            "png_gcs_uri": self.png_gcs_uri,
            "meta": meta,
        }


@dataclass(frozen=True)
class ManifestFailure:
    request: ChartRequestInput
    error: StepError

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "error": self.error.to_dict()}


@dataclass(frozen=True)
class ManifestHeader:
    """What a manifest says about its step, whatever the charts gave."""

    run_id: str
    step_id: str
    symbol: str
    timeframe: str
    min_images: int
    requested: list[ChartRequestInput]
    charts_api_mode: str


def build_manifest(
    header: ManifestHeader,
    items: list[ManifestItem],
    failures: list[ManifestFailure],
    *,
    created_at: datetime,
) -> dict[str, Any]:
    """Items and failures follow the order of `requested`, so the document is deterministic."""
    order = {r["chartTemplateId"]: i for i, r in enumerate(header.requested)}
    manifest = {
        "schemaVersion": SCHEMA_VERSION,
        "runId": header.run_id,
        "stepId": header.step_id,
        "createdAt": rfc3339_utc(created_at),
        "symbol": header.symbol,
        "timeframe": header.timeframe,
        "minImages": header.min_images,
        "chartsApiMode": header.charts_api_mode,
        "requested": header.requested,
        "items": [i.to_dict() for i in sorted(items, key=lambda i: order[i.chart_template_id])],
        "failures": [
            f.to_dict() for f in sorted(failures, key=lambda f: order[f.request["chartTemplateId"]])
        ],
    }
    check_manifest(manifest)
    return manifest


def check_manifest(manifest: dict[str, Any]) -> None:
    from worker_chart_export.bundled.contracts import MANIFEST, schema_errors

    problems = schema_errors(MANIFEST, manifest)
    if problems:
        raise InvalidManifestError(
            "manifest violates charts_outputs_manifest.schema.json: " + "; ".join(problems)
        )


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    # allow_nan=False: NaN/Infinity are not JSON, and downstream parsers reject them
    return (json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
