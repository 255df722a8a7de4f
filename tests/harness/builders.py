"""Builders for flow_runs and templates, shared by unit, integration and e2e tests."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SAMPLE_FLOW_RUN = REPO / "fixtures" / "flow_run.sample.json"
TEMPLATES_DIR = REPO / "chart-templates"


def load_templates() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in TEMPLATES_DIR.glob("*.json")}


def chart_step(**overrides: Any) -> dict[str, Any]:
    step = {
        "stepType": "CHART_EXPORT",
        "status": "READY",
        "timeframe": "1h",
        "dependsOn": [],
        "inputs": {
            "minImages": 2,
            "requests": [
                {"chartTemplateId": "price_psar_adi_v1"},
                {"chartTemplateId": "price_ema_volume_v1"},
                {"chartTemplateId": "momentum_rsi_macd_v1"},
            ],
        },
    }
    step.update(copy.deepcopy(overrides))
    return step


def chart_step_for(template_ids: Sequence[str], *, min_images: int | None = None) -> dict[str, Any]:
    """A READY CHART_EXPORT step requesting `template_ids`, all of them needed by default."""
    needed = len(template_ids) if min_images is None else min_images
    return chart_step(
        inputs={"minImages": needed, "requests": [{"chartTemplateId": t} for t in template_ids]}
    )


def flow_run(steps: dict[str, Any], *, run_id: str = "run1", symbol: Any = "BTCUSDT") -> dict[str, Any]:
    return {
        "runId": run_id,
        "flowKey": "test_flow",
        "status": "RUNNING",
        "scope": {"symbol": symbol},
        "steps": steps,
    }
