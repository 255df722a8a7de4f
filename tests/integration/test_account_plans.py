"""Each account's plan (issue 26, item 3): a template is valid when some configured account's
plan allows it, and its calls go only to such accounts; when none can, the step fails
VALIDATION_FAILED naming the plan it needs, before any call.

run-local in real mode, as a user runs it (`main([...])`, an accounts file whose accounts
declare their `plan`), against the CHART-IMG stand-in, whose keys have those plans: a
1920x1080 request on a BASIC key would be answered 403 "Exceed Max Usage Resolution Limit".
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.builders import TEMPLATES_DIR, chart_step_for, flow_run
from harness.chart_img_server import ChartImgServer, register_templates_from
from worker_chart_export.cli.main import main

BIG = "big_1920_v1"  # 1920x1080: PRO and above
SMALL = "price_ema_volume_v1"  # 800x600 and 3 parameters: any plan


@pytest.fixture
def templates(tmp_path: Path, chart_img_server: ChartImgServer) -> Path:
    folder = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR, folder)
    big = json.loads((folder / "price_psar_adi_v1.json").read_text())
    big.update(id=BIG)
    big["request"].update(width=1920, height=1080)
    (folder / f"{BIG}.json").write_text(json.dumps(big))
    register_templates_from(chart_img_server, folder)
    return folder


@pytest.fixture
def run_local(
    tmp_path: Path, templates: Path, chart_img_server: ChartImgServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    for variable in ("CHARTS_BUCKET", "CHART_IMG_ACCOUNTS_JSON", "CHARTS_LOCAL_OUTPUT_DIR", "CHART_IMG_PLAN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CHART_TEMPLATES_DIR", str(templates))
    monkeypatch.setenv("CHART_IMG_BASE_URL", chart_img_server.base_url)

    def run(
        plans: dict[str, str], template_ids: list[str], run_id: str, quotas: dict[str, int] | None = None
    ) -> tuple[int, dict[str, Any]]:
        accounts = [
            {
                "id": a,
                "apiKey": chart_img_server.add_account(a, plan=p, daily_quota=(quotas or {}).get(a)),
                "plan": p,
                "ratePerSecond": 50,
                "burst": 10,
            }
            for a, p in plans.items()
        ]
        (tmp_path / "accounts.json").write_text(json.dumps(accounts))
        source = tmp_path / f"{run_id}.json"
        source.write_text(json.dumps(flow_run({"charts": chart_step_for(template_ids)}, run_id=run_id)))
        code = main(
            [
                "run-local",
                f"--flow-run-path={source}",
                f"--output-dir={tmp_path / 'out'}",
                "--charts-api-mode=real",
                f"--accounts-config-path={tmp_path / 'accounts.json'}",
                "--output-summary=json",
            ]
        )
        state = json.loads((tmp_path / "out" / "flow_runs" / f"{run_id}.json").read_text())
        return code, state["steps"]["charts"]

    yield run


def test_a_big_chart_whose_pro_key_is_spent_names_the_basic_key_its_plan_cannot_use(
    run_local: Any, chart_img_server: ChartImgServer, tmp_path: Path
) -> None:
    """Issue 38: with BASIC and PRO keys, after the PRO key answered "Limit Exceeded" the big
    chart failed "every CHART-IMG account is at its daily limit" while the BASIC key had its
    quota: the failure now names the accounts whose plan cannot serve it, and why."""
    code, step = run_local({"basic": "BASIC", "pro": "PRO"}, [BIG, SMALL], "run-spent", quotas={"pro": 0})
    assert (code, step["status"]) == (1, "FAILED")
    manifest = json.loads(
        (tmp_path / "out" / "gcs").glob("*/charts/run-spent/charts/manifest.json").__next__().read_text()
    )
    (big,) = [f["error"] for f in manifest["failures"] if f["request"]["chartTemplateId"] == BIG]
    assert big["code"] == "CHART_API_LIMIT_EXCEEDED"
    assert big["message"].endswith(
        "; basic (BASIC) cannot serve it: the template asks for more than their plan allows"
    ), big["message"]
    assert big["details"]["otherPlanAccounts"] == [{"accountId": "basic", "plan": "BASIC"}]
    served = [(r.template, r.account_id, r.status) for r in chart_img_server.requests]
    assert [(a, s) for t, a, s in served if t == BIG] == [("pro", 429)]  # never the BASIC key
    assert [i["chartTemplateId"] for i in manifest["items"]] == [SMALL]


def test_a_big_chart_goes_to_the_pro_key_only_and_a_small_one_to_either(
    run_local: Any, chart_img_server: ChartImgServer
) -> None:
    for i in range(3):
        code, step = run_local({"basic": "BASIC", "pro": "PRO"}, [BIG, SMALL], f"run{i}")
        assert (code, step["status"]) == (0, "SUCCEEDED"), step.get("error")
    served = [(r.template, r.account_id, r.status) for r in chart_img_server.requests]
    assert {(t, s) for t, _, s in served} == {(BIG, 200), (SMALL, 200)}  # no 403, nothing refused
    assert {a for t, a, _ in served if t == BIG} == {"pro"}  # never the BASIC key
    assert len([t for t, _, _ in served if t == BIG]) == 3
    assert {a for t, a, _ in served if t == SMALL} <= {"basic", "pro"}
    assert "basic" in {a for t, a, _ in served if t == SMALL}  # spread: the BASIC key serves too


def test_with_basic_accounts_only_the_big_template_fails_validation_naming_pro(
    run_local: Any, chart_img_server: ChartImgServer
) -> None:
    code, step = run_local({"basic1": "BASIC", "basic2": "BASIC"}, [BIG, SMALL], "run1")
    assert (code, step["status"], step["error"]["code"]) == (1, "FAILED", "VALIDATION_FAILED")
    assert step["error"]["message"].startswith(
        f"invalid step inputs: chart_templates/{BIG}: needs the PRO plan (or above), which no configured "
        "account has (basic1 BASIC, basic2 BASIC)"
    )
    assert all(SMALL not in p for p in step["error"]["details"]["problems"])  # the small one is fine
    assert chart_img_server.requests == []  # 0 calls
    code, step = run_local({"basic1": "BASIC", "basic2": "BASIC"}, [SMALL], "run2")
    assert (code, step["status"]) == (0, "SUCCEEDED")
