"""`worker-chart-export accounts --check-file`: one line, ids or the problem, never a key.
(The quota table: test_accounts_quota.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker_chart_export.cli.main import main

KEY = "k3y-that-must-never-show-1234"


def check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None
) -> tuple[int, str, str]:
    path = tmp_path / "accounts.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code = main(["accounts", "--check-file", str(path)])
    out, err = capsys.readouterr()
    assert KEY not in out + err
    return code, out, err


def test_a_valid_file_prints_its_ids_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accounts = [{"id": "acc1", "apiKey": KEY}, {"id": "acc2", "apiKey": KEY + "2", "plan": "PRO"}]
    code, out, err = check(tmp_path, capsys, json.dumps(accounts))
    assert (code, err) == (0, "")
    assert out == f"accounts file {tmp_path / 'accounts.json'}: 2 account(s): acc1, acc2\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read (No such file or directory)"),
        ("[{", "not valid JSON at line 1 column 3"),
        (b"\xff\xfe[]", "is not UTF-8 text"),
        ("{}", "expected a JSON array of accounts, got object"),
        ("[]", "empty list"),
        (json.dumps([{"id": "acc1"}]), "item 1: missing 'apiKey'"),
        (json.dumps([{"id": "a b", "apiKey": KEY}]), "item 1: id must match"),
        (
            json.dumps([{"id": "acc1", "apiKey": KEY + " with spaces"}]),
            "item 1: 'apiKey' must be a non-empty",
        ),
        (json.dumps([{"id": "acc1", "apiKey": KEY, "dailyLimit": 0}]), "item 1: 'dailyLimit'"),
        (json.dumps([{"id": "x", "apiKey": KEY}, {"id": "x", "apiKey": KEY}]), "duplicate account id 'x'"),
    ],
)
def test_a_bad_file_is_one_error_line_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, problem: str
) -> None:
    code, out, err = check(tmp_path, capsys, content)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        f"worker-chart-export accounts: error: accounts file {tmp_path / 'accounts.json'}: "
    )
    assert problem in line


def test_check_file_takes_no_other_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accounts", "--check-file", str(tmp_path / "a.json"), "--json", "--local"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        "worker-chart-export accounts: error: --check-file takes no other flag (got --json, --local)\n",
    )
