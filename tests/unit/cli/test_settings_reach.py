"""The CLI's commands take what the environment sets, each value away from its default (a
command that dropped a setting and used the default would still look right with it)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.builders import SAMPLE_FLOW_RUN, load_templates
from worker_chart_export.cli.main import main


def test_serve_listens_on_port_when_no_flag_says_otherwise(
    settings_environment: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import worker_chart_export.functions.serve as serve

    served: list[tuple[int, dict[str, Any]]] = []
    monkeypatch.setattr(serve, "run_server", lambda port, **options: served.append((port, options)))
    settings_environment(PORT="8123", APP_ENV="staging")
    assert main(["serve", "--target", "advance_flow"]) == 0
    [line] = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert (line["message"], line["env"], line["port"]) == ("serving the function", "staging", 8123)
    assert main(["serve", "--target", "advance_flow", "--port", "9001", "--host", "127.0.0.1"]) == 0
    assert served == [
        (8123, {"host": "0.0.0.0", "target": "advance_flow"}),
        (9001, {"host": "127.0.0.1", "target": "advance_flow"}),
    ]


def test_templates_sync_checks_against_the_plan_chart_img_plan_names(
    settings_environment: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1920 x 1080 is PRO's largest image: refused under BASIC (800 x 600), valid under PRO."""
    template = copy.deepcopy(load_templates()["price_psar_adi_v1"])
    template["request"].update(width=1920, height=1080)
    (tmp_path / "price_psar_adi_v1.json").write_text(json.dumps(template), encoding="utf-8")
    settings_environment()
    assert main(["templates", "sync", "--dry-run", "--dir", str(tmp_path)]) == 1
    assert "800" in capsys.readouterr().out
    settings_environment(CHART_IMG_PLAN="PRO")
    assert main(["templates", "sync", "--dry-run", "--dir", str(tmp_path)]) == 0
    assert "price_psar_adi_v1: valid" in capsys.readouterr().out


def test_run_local_logs_under_app_env(
    settings_environment: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings_environment(APP_ENV="staging")
    code = main(["run-local", "--flow-run-path", str(SAMPLE_FLOW_RUN), "--output-dir", str(tmp_path)])
    assert code == 0
    lines = [json.loads(text) for text in capsys.readouterr().err.splitlines()]
    assert lines and {line["env"] for line in lines} == {"staging"}
