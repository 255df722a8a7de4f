"""`worker-chart-export accounts --local`: run-local's usage file as a table and as JSON, the
accounts from the worker's own sources; never a key; every problem one line. (Against
Firestore: tests/integration/test_accounts_command.py; after a real run-local:
tests/integration/test_run_local_real_mode.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.midnight import now_with_room_in_the_day
from harness.secret_scan import TEST_KEY
from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.cli.accounts_table import NOT_CONFIGURED, until
from worker_chart_export.cli.main import main
from worker_chart_export.core.chart_img.usage import Pacing

KEYS = ["test-key-0a1b2c3d4e5f60718293a4b5c6d7e8f9", "test-key-9f8e7d6c5b4a39281706f5e4d3c2b1a0"]
USAGE_FILE = "chart_img_accounts_usage.json"


def accounts_file(tmp_path: Path, entries: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "accounts.json"
    default = [
        {"id": "acc1", "apiKey": KEYS[0], "plan": "BASIC"},
        {"id": "acc2", "apiKey": KEYS[1], "plan": "PRO", "dailyLimit": 3},
    ]
    path.write_text(json.dumps(default if entries is None else entries))
    return path


def write_usage(out: Path) -> None:
    """The usage run-local leaves: acc1 used twice (paced; a third call never left, its unit
    given back), acc2 refused by CHART-IMG's quota, and an account no longer configured;
    written by the worker's own file store."""
    store, now = FileUsageStore(out / USAGE_FILE), now_with_room_in_the_day()
    for _ in range(3):
        reservation = store.reserve("acc1", default_limit=50, now=now, pacing=Pacing(0.9, 3, 0.3))
    store.refund("acc1", day=reservation.day or "")
    store.reserve("acc2", default_limit=3, now=now)
    store.mark_exhausted("acc2", now=now)
    store.reserve("retired", default_limit=44, now=now)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["accounts", *argv])
    out, err = capsys.readouterr()
    assert not TEST_KEY.search(out + err)
    return code, out, err


@pytest.fixture
def no_accounts_env(settings_environment: Callable[..., None]) -> None:
    settings_environment()  # no CHART_IMG_ACCOUNTS_JSON, no secret, no output dir


def test_the_table_shows_each_account_and_the_days_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None
) -> None:
    write_usage(tmp_path / "out")
    code, out, err = run(
        capsys, "--output-dir", str(tmp_path / "out"), "--accounts-config-path", str(accounts_file(tmp_path))
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].endswith(f"usage from run-local's usage file {tmp_path / 'out' / USAGE_FILE}")
    assert lines[1].split() == [
        *("ACCOUNT", "PLAN", "LIMIT", "USED", "LEFT", "GIVEN", "BACK", "NEXT", "SLOT", "STATE", "WHY")
    ]
    assert lines[2].split()[:6] == ["acc1", "BASIC", "50", "2", "48", "1"]
    acc2 = lines[3].split()
    assert acc2[:6] == ["acc2", "PRO", "3", "1", "0", "0"] and "exhausted" in acc2  # 1 spent, 0 left
    assert "CHART-IMG refused the day's quota (until" in lines[3]  # mark_exhausted's reason
    assert lines[4].startswith(
        "total: 2 account(s), 1 usable, 3 used today (1 given back: calls that never reached CHART-IMG) "
        "of 53: 48 left today; "
    )
    assert lines[5] == "usage documents of accounts not configured: retired"


def test_json_carries_the_rows_and_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings_environment: Callable[..., None]
) -> None:
    write_usage(tmp_path / "out")
    # the accounts from the environment this time, the folder from CHARTS_LOCAL_OUTPUT_DIR
    settings_environment(
        CHART_IMG_ACCOUNTS_JSON=accounts_file(tmp_path).read_text(),
        CHARTS_LOCAL_OUTPUT_DIR=str(tmp_path / "out"),
    )
    code, out, _ = run(capsys, "--local", "--json")
    assert code == 0
    data = json.loads(out)
    rows = {row["accountId"]: row for row in data["accounts"]}
    assert list(rows) == ["acc1", "acc2"]
    assert (rows["acc1"]["usedToday"], rows["acc1"]["leftToday"], rows["acc1"]["dailyLimitFrom"]) == (
        2,
        48,
        "plan",
    )
    assert (rows["acc2"]["leftToday"], rows["acc2"]["state"], rows["acc2"]["dailyLimitFrom"]) == (
        0,
        "exhausted",
        "account",
    )
    assert (rows["acc1"]["refundedToday"], rows["acc2"]["refundedToday"]) == (1, 0)
    assert data["totals"]["leftToday"] == 48 and data["unconfigured"] == ["retired"]
    assert data["totals"]["refundedToday"] == 1
    assert data["source"].startswith("run-local's usage file ")


def test_without_accounts_every_usage_document_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None
) -> None:
    write_usage(tmp_path / "out")
    code, out, _ = run(capsys, "--output-dir", str(tmp_path / "out"))
    assert code == 0
    assert out.splitlines()[1] == (
        f"{NOT_CONFIGURED}: the accounts below are the usage documents', plan and pacing unknown"
    )
    assert [line.split()[0] for line in out.splitlines()[3:6]] == ["acc1", "acc2", "retired"]
    assert "daily limits unknown" in out.splitlines()[-1]


def test_without_accounts_or_usage_documents_it_says_one_thing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None
) -> None:
    code, out, _ = run(capsys, "--output-dir", str(tmp_path / "never-ran"))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2, out
    assert lines[1] == f"{NOT_CONFIGURED} and no usage document there: nothing to show"
    assert NOT_CONFIGURED.startswith(
        "no accounts configured (--accounts-config-path, CHART_IMG_ACCOUNTS_JSON"
    )


def test_a_usage_file_not_written_yet_is_a_whole_day_left_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None
) -> None:
    out_dir = tmp_path / "never-ran"
    code, out, _ = run(
        capsys, "--output-dir", str(out_dir), "--json", "--accounts-config-path", str(accounts_file(tmp_path))
    )
    data = json.loads(out)
    assert code == 0 and "not written yet" in data["source"]
    assert [row["leftToday"] for row in data["accounts"]] == [50, 3]
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing-accounts", "--accounts-config-path {accounts}: No such file or directory"),
        ("bad-accounts", "--accounts-config-path {accounts}: item 1: missing 'apiKey'"),
        ("bad-usage", "run-local's usage file {usage} is unreadable (Expecting value: line 1 column 1"),
    ],
)
def test_each_problem_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None, setup: str, expected: str
) -> None:
    accounts, usage = tmp_path / "accounts.json", tmp_path / "out" / USAGE_FILE
    if setup == "bad-accounts":
        accounts_file(tmp_path, [{"id": "acc1"}])
    else:
        accounts_file(tmp_path)
        if setup == "missing-accounts":
            accounts.unlink()
    usage.parent.mkdir()
    usage.write_text("not json" if setup == "bad-usage" else "{}")
    code, out, err = run(
        capsys, "--local", "--output-dir", str(usage.parent), "--accounts-config-path", str(accounts)
    )
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(
        "worker-chart-export accounts: error: " + expected.format(accounts=accounts, usage=usage)
    ), line


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-1, "now"),
        (0, "now"),
        (0.84, "in 0.8 s"),
        (42, "in 42 s"),
        (600, "in 10 min"),
        (7500, "in 2 h 05 min"),
    ],
)
def test_moments_read_as_a_person_reads_them(seconds: float, text: str) -> None:
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    assert until(datetime.fromtimestamp(now.timestamp() + seconds, UTC), now) == text
    assert until(None, now) == "unknown"


def test_a_key_in_a_stored_reason_never_reaches_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_accounts_env: None
) -> None:
    """A usage file written by an older worker, whose reasons quote CHART-IMG echoing the key
    in another form: neither the table nor --json prints any form of it."""
    from harness.secret_scan import key_forms, leaks

    key = 'aq/"key\\with+odd%chars=0123456789abcdef'
    forms = key_forms(key)
    store, now = FileUsageStore(tmp_path / USAGE_FILE), now_with_room_in_the_day()
    store.reserve("acc1", default_limit=50, now=now)
    store.mark_disabled("acc1", reason=f'CHART-IMG refused the key 401 "{forms["json_slash"]}"', now=now)
    store.reserve("acc2", default_limit=50, now=now)
    store.mark_exhausted("acc2", now=now, reason=f"429 {forms['url_quote']} {forms['base64_1']}")
    config = accounts_file(tmp_path, [{"id": "acc1", "apiKey": key}, {"id": "acc2", "apiKey": KEYS[0]}])
    flags = ["--local", "--output-dir", str(tmp_path), "--accounts-config-path", str(config)]
    code, out, err = run(capsys, *flags, "--json")
    assert code == 0 and json.loads(out)["accounts"]
    assert "<redacted>" in out
    table_code, table, table_err = run(capsys, *flags)
    assert table_code == 0 and "acc1" in table
    assert leaks([out, err, table, table_err], [key]) == []


def test_the_accounts_come_from_the_secret_chart_img_accounts_secret_names(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    settings_environment: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No JSON in the environment: the worker's own wiring reads CHART_IMG_ACCOUNTS_SECRET,
    a bare secret id completed with GOOGLE_CLOUD_PROJECT (a wiring that dropped either would
    show no account, or ask another name)."""
    from types import SimpleNamespace

    from google.cloud import secretmanager

    asked: list[str] = []

    class Secrets:
        def access_secret_version(self, *, name: str) -> Any:
            asked.append(name)
            return SimpleNamespace(payload=SimpleNamespace(data=accounts_file(tmp_path).read_bytes()))

    monkeypatch.setattr(secretmanager, "SecretManagerServiceClient", Secrets)
    write_usage(tmp_path / "out")
    settings_environment(
        CHART_IMG_ACCOUNTS_SECRET="chart-img-accounts-staging",
        GOOGLE_CLOUD_PROJECT="acme-charts",
        CHARTS_LOCAL_OUTPUT_DIR=str(tmp_path / "out"),
    )
    code, out, _ = run(capsys, "--local", "--json")
    assert code == 0
    assert [row["accountId"] for row in json.loads(out)["accounts"]] == ["acc1", "acc2"]
    assert asked == ["projects/acme-charts/secrets/chart-img-accounts-staging/versions/latest"]
