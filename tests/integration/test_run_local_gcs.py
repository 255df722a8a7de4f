"""run-local with a bucket configured writes to GCS (here fake-gcs-server) instead of the folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN
from harness.gcs_emulator import list_objects, read_object
from worker_chart_export.cli.main import main

pytestmark = pytest.mark.emulators


def test_run_local_with_a_bucket_writes_to_gcs(
    tmp_path: Path, gcs_bucket: tuple[Any, str], capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    client, bucket = gcs_bucket
    monkeypatch.delenv("CHARTS_API_MODE", raising=False)
    code = main(
        [
            "run-local",
            "--flow-run-path",
            str(SAMPLE_FLOW_RUN),
            "--output-dir",
            str(tmp_path),
            f"--charts-bucket=gs://{bucket}",
            "--output-summary=json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["status"] == "SUCCEEDED"
    prefix = "charts/run_20261122_btcusdt_0001/charts_1h/"
    assert summary["outputsManifestGcsUri"] == f"gs://{bucket}/{prefix}manifest.json"
    assert summary["localArtifactsDir"] is None and not (tmp_path / "gcs").exists()
    names = list_objects(client, bucket, prefix)
    assert len([n for n in names if n.endswith(".png")]) == 3 and f"{prefix}manifest.json" in names
    manifest = json.loads(read_object(client, bucket, f"{prefix}manifest.json")[0])
    assert {item["png_gcs_uri"] for item in manifest["items"]} == {
        f"gs://{bucket}/{n}" for n in names if n.endswith(".png")
    }
