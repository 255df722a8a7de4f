"""The contracts we wrote from the seeds hold for what we ship: sample, templates, fixtures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from jsonschema import Draft202012Validator

from harness.builders import REPO, SAMPLE_FLOW_RUN, load_templates
from worker_chart_export.bundled.contracts import (
    CHART_TEMPLATE,
    CONTRACTS_DIR,
    FLOW_RUN,
    MANIFEST,
    schema_errors,
)
from worker_chart_export.core.chart_img.plans import PLANS
from worker_chart_export.core.templates.template_check import template_problems


@pytest.mark.parametrize("name", [FLOW_RUN, MANIFEST, CHART_TEMPLATE])
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = json.loads((CONTRACTS_DIR / name).read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_sample_flow_run_validates_and_has_the_promised_steps() -> None:
    sample = json.loads(SAMPLE_FLOW_RUN.read_text())
    assert schema_errors(FLOW_RUN, sample) == []
    chart_steps = [
        s for s in sample["steps"].values() if s["stepType"] == "CHART_EXPORT" and s["status"] == "READY"
    ]
    assert len(chart_steps) >= 1 and len(chart_steps[0]["inputs"]["requests"]) == 3
    assert {s["stepType"] for s in sample["steps"].values()} > {"CHART_EXPORT"}


def test_flow_run_schema_rejects_what_it_should() -> None:
    sample = json.loads(SAMPLE_FLOW_RUN.read_text())
    del sample["steps"]["charts_1h"]["stepType"]
    assert any("stepType" in e for e in schema_errors(FLOW_RUN, sample))


def test_templates_validate_and_are_named_by_id() -> None:
    templates = load_templates()
    assert len(templates) >= 3 and "price_psar_adi_v1" in templates
    for file_id, template in templates.items():
        assert schema_errors(CHART_TEMPLATE, template) == [], file_id
        assert template["id"] == file_id
        assert template_problems(template, PLANS["BASIC"]) == [], file_id  # CHART-IMG's own limits


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"width": 399}, "$.request.width"),
        ({"height": 299}, "$.request.height"),
        ({"width": 4096}, "$.request.width"),  # above every plan's maximum
        ({"scale": {"mode": "log"}}, "$.request.scale"),
        ({"drawings": [{"name": "Horizontal Line"}]}, "$.request.drawings[0]"),  # input required
        ({"drawings": [{"name": "Text", "input": {}, "zOrder": "front"}]}, "$.request.drawings[0].zOrder"),
    ],
)
def test_template_schema_says_what_chart_img_documents(change: dict[str, object], path: str) -> None:
    template = load_templates()["price_psar_adi_v1"]
    bad = {**template, "request": {**template["request"], **change}}
    assert any(e.startswith(f"{path}: ") for e in schema_errors(CHART_TEMPLATE, bad)), path


def test_template_schema_forbids_market_parameters() -> None:
    template = load_templates()["price_psar_adi_v1"]
    for field in ("symbol", "interval"):
        bad = {**template, "request": {**template["request"], field: "X"}}
        assert schema_errors(CHART_TEMPLATE, bad), field


def test_fixture_pngs_regenerate_identically() -> None:
    """The stand-in PNGs are reproducible from the script kept in the repo."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "render_fixture_pngs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
