"""`templates sync` on a folder that holds more than templates: what is no template is skipped
with one line naming the file, and no problem quotes a file's content (a schema message names
the path and the rule, never the value): an accounts file kept beside the templates, as
deploy/README.md once suggested, never has its key printed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.builders import TEMPLATES_DIR
from harness.secret_scan import key_forms, leaks
from worker_chart_export.cli.main import main
from worker_chart_export.core.chart_img.plans import PLANS
from worker_chart_export.core.templates.template_check import template_problems
from worker_chart_export.tools.templates_sync import load_templates, run_templates_sync

KEY = 'ts/"key\\with+odd%chars=0123456789abcdef'
ACCOUNTS = [{"id": "acc1", "apiKey": KEY, "plan": "PRO"}]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copytree(TEMPLATES_DIR, tmp_path, dirs_exist_ok=True)
    (tmp_path / "chart-img.accounts.json").write_text(json.dumps(ACCOUNTS))
    return tmp_path


def test_an_accounts_file_in_the_folder_is_skipped_with_one_line(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["templates", "sync", "--dry-run", "--dir", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "  chart-img.accounts.json: skipped: not a chart template (a JSON array, not an object)" in out
    assert out.count("chart-img.accounts.json") == 1
    assert "price_psar_adi_v1: valid" in out
    assert leaks([out, err], [KEY]) == []


def test_objects_that_are_no_template_are_skipped_and_templates_still_checked(tmp_path: Path) -> None:
    (tmp_path / "one-account.json").write_text(json.dumps(ACCOUNTS[0] | {"id": None}))
    (tmp_path / "settings.json").write_text(json.dumps({"apiKey": KEY}))
    (tmp_path / "quoted.json").write_text(json.dumps(KEY))
    # a layout alone makes a template (a broken one: no id, description, symbol template)
    (tmp_path / "layout-only.json").write_text(json.dumps({"layout": {"layoutId": "37wLAGgd"}}))
    loaded = load_templates(tmp_path)
    assert loaded.skipped == (
        "quoted.json: skipped: not a chart template (a JSON string, not an object)",
        "settings.json: skipped: not a chart template "
        "(none of chartImgSymbolTemplate, description, id, layout, request)",
    )
    # `id` makes it a template, a broken one: each problem names the path, never the value
    assert {(p.file, p.path) for p in loaded.problems} >= {("one-account.json", "$.apiKey")}
    assert "layout-only.json" in {p.file for p in loaded.problems}
    assert leaks([str(p) for p in loaded.problems], [KEY]) == []


def test_a_folder_of_no_templates_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "chart-img.accounts.json").write_text(json.dumps(ACCOUNTS))
    code, text = run_templates_sync(tmp_path, None, dry_run=True)
    assert code == 1
    assert "no chart template among its *.json files" in text
    assert "chart-img.accounts.json: skipped" in text and leaks([text], [KEY]) == []


@pytest.mark.parametrize(
    "document",
    [
        ACCOUNTS,  # the accounts file itself, checked as a template
        {"id": "t1", "description": "d", "chartImgSymbolTemplate": "X:{symbol}", "request": ACCOUNTS},
        {"id": "t1", "description": {"k": KEY}, "chartImgSymbolTemplate": "X:{symbol}", "request": {}},
        {
            "id": "t1",
            "description": "d",
            "chartImgSymbolTemplate": "X:{symbol}",
            "request": {},
            "tags": [KEY, KEY],
        },
        {
            "id": "t1",
            "description": "d",
            "chartImgSymbolTemplate": "X:{symbol}",
            "request": {},
            "version": KEY,
        },
    ],
    ids=["accounts-array", "request-array", "description-object", "tags-repeated", "version-string"],
)
def test_schema_problems_never_carry_the_value(document: object) -> None:
    problems = template_problems(document, PLANS["ULTRA"])
    assert problems
    messages = [f"{p.suffix}: {p.message}" for p in problems]
    assert leaks(messages, [KEY]) == [], messages
    assert not any(form in message for form in key_forms(KEY).values() for message in messages)
