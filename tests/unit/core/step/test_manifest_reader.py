"""The one manifest reader: what the writer wrote comes back, and whatever is not such a
manifest is refused with an error naming where (file and JSON path) it breaks the contract."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.step.manifest import (
    ManifestFailure,
    ManifestHeader,
    ManifestItem,
    build_manifest,
    manifest_bytes,
)
from worker_chart_export.core.step.manifest_reader import (
    ManifestUnreadable,
    ReadItem,
    manifest_of,
    read_manifest,
)

CREATED = datetime(2026, 11, 22, 4, 12, 4, 500_000, tzinfo=UTC)
GENERATED_A = datetime(2026, 11, 22, 4, 12, 3, 123_000, tzinfo=UTC)
GENERATED_C = datetime(2026, 11, 22, 4, 12, 1, 7_000, tzinfo=UTC)
URI_A = "gs://bkt/charts/run1/charts/20261122T041203123Z_BINANCE-BTCUSDT_1h_a_v1.png"
URI_C = "gs://bkt/charts/run1/charts/20261122T041201007Z_BINANCE-BTCUSDT_1h_c_v1.png"


def written() -> bytes:
    """A manifest as the worker writes it: one chart rendered, one reused, one failure."""
    header = ManifestHeader(
        run_id="run1",
        step_id="charts",
        symbol="BTCUSDT",
        timeframe="1h",
        min_images=2,
        requested=[
            {"chartTemplateId": "a_v1"},
            {"chartTemplateId": "b_v1", "note": "kept as it is"},
            {"chartTemplateId": "c_v1"},
        ],
        charts_api_mode="mock",
    )
    items = [
        ManifestItem("c_v1", "Kind C", GENERATED_C, URI_C, "BINANCE:BTCUSDT", "c" * 64, reused=True),
        ManifestItem("a_v1", "Kind A", GENERATED_A, URI_A, "BINANCE:BTCUSDT", "a" * 64),
    ]
    failure = ManifestFailure(
        {"chartTemplateId": "b_v1", "note": "kept as it is"},
        StepError(ErrorCode.CHART_API_FAILED, "HTTP 422", {"httpStatus": 422}),
    )
    return manifest_bytes(build_manifest(header, items, [failure], created_at=CREATED))


def document(**changes: Any) -> dict[str, Any]:
    return {**json.loads(written()), **changes}


def refusal(raw: bytes | str | dict[str, Any] | list[Any]) -> ManifestUnreadable:
    with pytest.raises(ManifestUnreadable) as refused:
        if isinstance(raw, bytes | str):
            read_manifest(raw, "gs://bkt/charts/run1/charts/manifest.json")
        else:
            manifest_of(raw, "gs://bkt/charts/run1/charts/manifest.json")
    message = str(refused.value)
    assert message.startswith("gs://bkt/charts/run1/charts/manifest.json: ")
    return refused.value


# --- what was written comes back


def test_what_the_writer_wrote_is_read_back() -> None:
    manifest = read_manifest(written(), "manifest.json")
    assert (manifest.schema_version, manifest.run_id, manifest.step_id) == (1, "run1", "charts")
    assert manifest.created_at == datetime(2026, 11, 22, 4, 12, 4, 500_000, tzinfo=UTC)
    assert (manifest.symbol, manifest.timeframe, manifest.min_images) == ("BTCUSDT", "1h", 2)
    assert (manifest.charts_api_mode, manifest.outputs_prefix) == ("mock", None)
    assert manifest.requested == (
        {"chartTemplateId": "a_v1"},
        {"chartTemplateId": "b_v1", "note": "kept as it is"},
        {"chartTemplateId": "c_v1"},
    )
    # in the order of `requested`, as the writer sorts them
    assert manifest.items == (
        ReadItem(
            "a_v1",
            "Kind A",
            datetime(2026, 11, 22, 4, 12, 3, 123_000, tzinfo=UTC),
            URI_A,
            {"chartImgSymbol": "BINANCE:BTCUSDT", "requestDigest": "a" * 64},
        ),
        ReadItem(
            "c_v1",
            "Kind C",
            datetime(2026, 11, 22, 4, 12, 1, 7_000, tzinfo=UTC),
            URI_C,
            {"chartImgSymbol": "BINANCE:BTCUSDT", "requestDigest": "c" * 64, "reused": True},
        ),
    )
    a, c = manifest.items
    assert (a.chart_img_symbol, a.request_digest, a.reused) == ("BINANCE:BTCUSDT", "a" * 64, False)
    assert (c.chart_img_symbol, c.request_digest, c.reused) == ("BINANCE:BTCUSDT", "c" * 64, True)
    assert manifest.failures == (
        ManifestFailure(
            {"chartTemplateId": "b_v1", "note": "kept as it is"},
            StepError(ErrorCode.CHART_API_FAILED, "HTTP 422", {"httpStatus": 422}),
        ),
    )
    assert manifest.failures[0].error.code is ErrorCode.CHART_API_FAILED


def test_text_and_a_parsed_document_read_alike() -> None:
    from_bytes = read_manifest(written(), "m")
    assert read_manifest(written().decode(), "m") == from_bytes
    assert manifest_of(json.loads(written()), "m") == from_bytes


def test_what_the_schema_lets_another_writer_leave_out_or_add_is_read() -> None:
    """An older worker's manifest: no chartsApiMode, items without meta; what the schema
    reserves (label, signed_url, expires_at, outputsPrefix) is read too."""
    raw = document(outputsPrefix="gs://bkt/charts/run1/charts/")
    del raw["chartsApiMode"]
    raw["items"][0] = {
        "chartTemplateId": "a_v1",
        "kind": "Kind A",
        "generatedAt": "2026-11-22T04:12:03Z",
        "png_gcs_uri": URI_A,
        "label": "Price",
        "signed_url": "https://example.com/a.png",
        "expires_at": "2026-11-23T00:00:00.123456789Z",
    }
    manifest = manifest_of(raw, "m")
    assert manifest.charts_api_mode is None and manifest.outputs_prefix == "gs://bkt/charts/run1/charts/"
    item = manifest.items[0]
    assert (item.label, item.signed_url, dict(item.meta)) == ("Price", "https://example.com/a.png", {})
    assert item.generated_at == datetime(2026, 11, 22, 4, 12, 3, tzinfo=UTC)
    assert item.expires_at == datetime(2026, 11, 23, 0, 0, 0, 123_456, tzinfo=UTC)
    assert (item.chart_img_symbol, item.request_digest, item.reused) == (None, None, False)


# --- refusals: each names the file and the JSON path


def test_an_empty_file_is_refused() -> None:
    refused = refusal(b"\n")
    assert refused.json_path == "$" and str(refused).endswith(": empty, not JSON")


@pytest.mark.parametrize("kept", [1, 100, 250, -30, -2])
def test_a_file_cut_short_is_refused_as_such(kept: int) -> None:
    refused = refusal(written()[:kept])
    assert refused.json_path == "$"
    assert "not JSON, it ends inside a value (" in str(refused) and "a file cut short?" in str(refused)


def test_text_that_is_not_json_is_refused_with_its_line_and_column() -> None:
    refused = refusal(b'{"schemaVersion": 1,\n  "runId": run1}')
    assert refused.json_path == "$"
    assert str(refused).endswith(": not JSON (Expecting value: line 2 column 12)")


def test_nan_is_not_json() -> None:
    raw = written().replace(b'"httpStatus": 422', b'"httpStatus": NaN')
    assert str(refusal(raw)).endswith(": not JSON (NaN is not a JSON number)")


def test_bytes_that_are_not_utf8_are_refused() -> None:
    refused = refusal(written().replace(b"Kind A", b"Kind \xff"))
    assert refused.json_path == "$" and "not UTF-8 text (invalid start byte at byte " in str(refused)


@pytest.mark.parametrize(
    ("value", "found"), [([1], "an array"), ("m", "a string"), (None, "null"), (3.5, "a number")]
)
def test_a_document_that_is_not_an_object_is_refused(value: object, found: str) -> None:
    refused = refusal(json.dumps(value))
    assert str(refused).endswith(f": a manifest is a JSON object, found {found}")


@pytest.mark.parametrize(("version", "age"), [(0, "an older"), (2, "a newer")])
def test_another_format_version_is_refused_before_its_fields_are_judged(version: int, age: str) -> None:
    # another version may lay its fields out otherwise: only the version is named
    refused = refusal(document(schemaVersion=version, items="laid out otherwise"))
    assert refused.json_path == "$.schemaVersion" and len(refused.problems) == 1
    assert str(refused).endswith(
        f": not a manifest this reader reads: $.schemaVersion: format version {version}, "
        f"this reader reads version 1 ({age} format)"
    )


def test_another_tools_document_is_refused_its_unexpected_keys_first() -> None:
    flow_run = {"runId": "run1", "status": "RUNNING", "steps": {"charts": {"stepType": "CHART_EXPORT"}}}
    refused = refusal(flow_run)
    assert refused.json_path == "$"
    assert str(refused).startswith(
        "gs://bkt/charts/run1/charts/manifest.json: not a valid ChartsOutputsManifest: "
        "Additional properties are not allowed ('status', 'steps' were unexpected); "
    )
    assert str(refused).endswith(" (and 5 more)")  # 9 of the 10 required fields are missing
    assert len(refused.problems) == 10


def test_a_field_that_breaks_the_schema_is_named_by_its_path() -> None:
    raw = document()
    raw["items"][1]["png_gcs_uri"] = "https://example.com/c.png"
    refused = refusal(raw)
    assert refused.json_path == "$.items[1].png_gcs_uri" and len(refused.problems) == 1
    assert ": not a valid ChartsOutputsManifest: $.items[1].png_gcs_uri: 'https://example.com/c.png'" in str(
        refused
    )


def test_every_problem_is_listed_by_its_path() -> None:
    raw = document(minImages=-1, timeframe="7h")
    raw["failures"][0]["error"]["code"] = "SOMETHING_ELSE"
    refused = refusal(raw)
    assert [p.path for p in refused.problems] == ["$.failures[0].error.code", "$.minImages", "$.timeframe"]


@pytest.mark.parametrize(
    ("path", "value"),
    [("$.createdAt", "2026-02-30T04:12:04.500Z"), ("$.items[1].generatedAt", "2026-11-22T25:00:00Z")],
)
def test_a_date_time_that_is_no_moment_is_refused(path: str, value: str) -> None:
    """The schema's pattern lets them through (its `format` is not checked here)."""
    raw = document()
    if path == "$.createdAt":
        raw["createdAt"] = value
    else:
        raw["items"][1]["generatedAt"] = value
    refused = refusal(raw)
    assert refused.json_path == path
    assert f": not a valid ChartsOutputsManifest: {path}: {value!r} is not a moment (" in str(refused)
