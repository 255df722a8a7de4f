from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.exceptions import InvalidManifestError
from worker_chart_export.core.step.manifest import (
    ManifestFailure,
    ManifestHeader,
    ManifestItem,
    build_manifest,
    check_manifest,
    manifest_bytes,
)

NOW = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)
REQUESTED = [{"chartTemplateId": "a_v1"}, {"chartTemplateId": "b_v1"}, {"chartTemplateId": "c_v1"}]


def build(**overrides: object) -> dict:
    arguments = dict(
        run_id="run1",
        step_id="charts",
        symbol="BTCUSDT",
        timeframe="1h",
        min_images=2,
        requested=REQUESTED,
        items=[
            ManifestItem(
                "c_v1", "Kind C", NOW, "gs://bkt/charts/run1/charts/x_c_v1.png", "BINANCE:BTCUSDT", "c" * 64
            ),
            ManifestItem(
                "a_v1", "Kind A", NOW, "gs://bkt/charts/run1/charts/x_a_v1.png", "BINANCE:BTCUSDT", "a" * 64
            ),
        ],
        failures=[
            ManifestFailure({"chartTemplateId": "b_v1"}, StepError(ErrorCode.CHART_API_FAILED, "HTTP 422"))
        ],
        created_at=NOW,
        charts_api_mode="mock",
    )
    arguments.update(overrides)
    items, failures, created_at = (
        arguments.pop("items"),
        arguments.pop("failures"),
        arguments.pop("created_at"),
    )
    header = ManifestHeader(**arguments)  # type: ignore[arg-type]
    return build_manifest(header, items, failures, created_at=created_at)  # type: ignore[arg-type]


def test_manifest_follows_contract_and_request_order() -> None:
    manifest = build()
    assert manifest["schemaVersion"] == 1
    assert manifest["createdAt"] == "2026-11-22T04:00:00.000Z"
    assert [i["chartTemplateId"] for i in manifest["items"]] == ["a_v1", "c_v1"]
    assert manifest["items"][0] == {
        "chartTemplateId": "a_v1",
        "kind": "Kind A",
        "generatedAt": "2026-11-22T04:00:00.000Z",
        "png_gcs_uri": "gs://bkt/charts/run1/charts/x_a_v1.png",
        "meta": {
            "chartImgSymbol": "BINANCE:BTCUSDT",
            "requestDigest": "a" * 64,
            "endpoint": "advanced-chart",
        },
    }
    assert manifest["failures"] == [
        {"request": {"chartTemplateId": "b_v1"}, "error": {"code": "CHART_API_FAILED", "message": "HTTP 422"}}
    ]
    assert manifest["requested"] == REQUESTED and manifest["minImages"] == 2


def test_manifest_that_breaks_the_schema_is_refused() -> None:
    bad_uri = [ManifestItem("a_v1", "Kind A", NOW, "https://example.com/a.png", "BINANCE:BTCUSDT", "a" * 64)]
    with pytest.raises(InvalidManifestError, match="png_gcs_uri"):
        build(items=bad_uri, failures=[])
    manifest = build()
    manifest["failures"][0]["error"]["code"] = "SOMETHING_ELSE"
    with pytest.raises(InvalidManifestError, match="failures"):
        check_manifest(manifest)
    del manifest["runId"]
    with pytest.raises(InvalidManifestError, match="runId"):
        check_manifest(build() | {"runId": 5})


def test_a_refused_manifest_names_the_schema_and_every_problem() -> None:
    manifest = build() | {"runId": 5, "stepId": 6}
    with pytest.raises(InvalidManifestError) as refused:
        check_manifest(manifest)
    message = str(refused.value)
    assert message.startswith("manifest violates charts_outputs_manifest.schema.json: ")
    problems = message.removeprefix("manifest violates charts_outputs_manifest.schema.json: ").split("; ")
    assert {p.partition(":")[0] for p in problems} == {"$.runId", "$.stepId"} and len(problems) >= 2


def test_manifest_bytes_are_indented_utf8_json_with_a_final_newline_and_no_nan() -> None:
    manifest = {"symbol": "ÄÖ€", "n": [1]}
    assert manifest_bytes(manifest) == '{\n  "symbol": "ÄÖ€",\n  "n": [\n    1\n  ]\n}\n'.encode()
    with pytest.raises(ValueError):
        manifest_bytes({"n": float("nan")})
