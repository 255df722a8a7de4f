"""Chart templates in Firestore: the cached TemplateSource and `templates sync`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from harness.broken_firestore import BrokenFirestore
from harness.chart_img_server import new_key
from harness.firestore_emulator import FirestoreEmulator
from worker_chart_export.adapters.firestore import FirestoreTemplateSource
from worker_chart_export.core.chart_img.plans import PLANS, Plan
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.templates.template_check import StoredTemplate, template_problems
from worker_chart_export.core.templates.template_rules import TemplateProblem
from worker_chart_export.testing import FakeClock
from worker_chart_export.tools.templates_sync import (
    EXIT_INVALID,
    EXIT_OK,
    SyncAction,
    run_templates_sync,
    sync_templates,
)

pytestmark = pytest.mark.emulators

COLLECTION = "chart_templates"
BASIC = PLANS["BASIC"]


def template(template_id: str, **overrides: Any) -> dict[str, Any]:
    return {
        "id": template_id,
        "description": f"{template_id} chart",
        "chartImgSymbolTemplate": "BINANCE:{symbol}",
        "request": {
            "theme": "dark",
            "height": 600,
            "studies": [{"name": "Relative Strength Index", "input": {"length": 14}}],
        },
        **overrides,
    }


def documents(templates: Mapping[str, StoredTemplate]) -> dict[str, dict[str, Any]]:
    return {template_id: stored.document for template_id, stored in templates.items()}


def stored_templates(client: firestore.Client) -> dict[str, dict[str, Any]]:
    return {s.id: s.to_dict() or {} for s in client.collection(COLLECTION).stream()}


class CountingClient:
    """Delegates to a real client and counts get_all calls (the only RPC the source makes)."""

    def __init__(self, client: firestore.Client) -> None:
        self._client = client
        self.get_all_calls: list[list[str]] = []

    def collection(self, name: str) -> firestore.CollectionReference:
        return self._client.collection(name)

    def get_all(self, refs: list[firestore.DocumentReference], **kwargs: Any) -> Iterator[Any]:
        self.get_all_calls.append([r.id for r in refs])
        return self._client.get_all(refs, **kwargs)


# --- FirestoreTemplateSource ---------------------------------------------------------------


def test_templates_are_cached_until_the_ttl(firestore_client: firestore.Client) -> None:
    firestore_client.collection(COLLECTION).document("rsi_v1").set(template("rsi_v1"))
    counting, clock = CountingClient(firestore_client), FakeClock()
    source = FirestoreTemplateSource(counting, ttl_seconds=60, clock=clock)  # type: ignore[arg-type]

    first = source.get_templates(["rsi_v1", "later_v1"])
    second = source.get_templates(["rsi_v1", "later_v1"])

    assert documents(first) == documents(second) == {"rsi_v1": template("rsi_v1")}
    assert counting.get_all_calls == [["rsi_v1", "later_v1"]]  # the second call made no RPC

    # a template synced later is invisible until the cached "missing" expires
    firestore_client.collection(COLLECTION).document("later_v1").set(template("later_v1"))
    clock.advance(59)
    assert "later_v1" not in source.get_templates(["later_v1"])
    assert len(counting.get_all_calls) == 1
    clock.advance(2)
    assert documents(source.get_templates(["later_v1", "rsi_v1"])) == {
        "later_v1": template("later_v1"),
        "rsi_v1": template("rsi_v1"),
    }
    assert counting.get_all_calls[1:] == [["later_v1", "rsi_v1"]]


def test_only_uncached_ids_are_fetched(firestore_client: firestore.Client) -> None:
    for template_id in ("a_v1", "b_v1"):
        firestore_client.collection(COLLECTION).document(template_id).set(template(template_id))
    counting = CountingClient(firestore_client)
    source = FirestoreTemplateSource(counting, ttl_seconds=60, clock=FakeClock())  # type: ignore[arg-type]

    source.get_templates(["a_v1"])
    both = source.get_templates(["a_v1", "b_v1", "a_v1"])

    assert set(both) == {"a_v1", "b_v1"}
    assert counting.get_all_calls == [["a_v1"], ["b_v1"]]


def test_the_worker_reads_a_template_as_it_is_now_and_checks_a_version_once(
    firestore_client: firestore.Client,
) -> None:
    """No TTL (the worker's): an edit is what the next step reads, not five minutes later
    (issue 37: a template edited mid-retry is used by the next claim); an unchanged version
    comes back as the StoredTemplate already checked."""
    reference = firestore_client.collection(COLLECTION).document("rsi_v1")
    reference.set(template("rsi_v1"))
    source = FirestoreTemplateSource(firestore_client, clock=FakeClock())
    first = source.get_templates(["rsi_v1"])["rsi_v1"]
    assert source.get_templates(["rsi_v1"])["rsi_v1"] is first  # read again, the same version
    reference.update({"request.theme": "light"})
    edited = source.get_templates(["rsi_v1"])["rsi_v1"]
    assert edited is not first and edited.document["request"]["theme"] == "light"


def test_returned_templates_cannot_alter_the_cache(firestore_client: firestore.Client) -> None:
    firestore_client.collection(COLLECTION).document("rsi_v1").set(template("rsi_v1"))
    source = FirestoreTemplateSource(firestore_client, clock=SYSTEM_CLOCK)

    source.get_templates(["rsi_v1"])["rsi_v1"].document["request"]["theme"] = "light"

    assert source.get_templates(["rsi_v1"])["rsi_v1"].document["request"]["theme"] == "dark"


def test_a_stored_version_is_checked_once_and_an_edit_is_checked_again(
    firestore_client: firestore.Client,
) -> None:
    """After the TTL the template is read again; an unchanged update_time keeps its check."""
    reference = firestore_client.collection(COLLECTION).document("rsi_v1")
    reference.set(template("rsi_v1"))
    checked: list[str] = []

    def counting_check(document: Any, plan: Plan) -> list[TemplateProblem]:
        checked.append(document["request"]["theme"])
        return template_problems(document, plan)

    clock = FakeClock()
    source = FirestoreTemplateSource(firestore_client, ttl_seconds=60, clock=clock, check=counting_check)
    first = source.get_templates(["rsi_v1"])["rsi_v1"]
    assert first.problems(BASIC) == () and first.problems(BASIC) == ()
    assert checked == ["dark"]

    clock.advance(61)  # read again: same update_time, same StoredTemplate, no second check
    again = source.get_templates(["rsi_v1"])["rsi_v1"]
    assert again is first and again.revision == reference.get().update_time
    assert again.problems(BASIC) == () and checked == ["dark"]

    reference.update({"request.theme": "blue"})  # edited by hand in the console
    clock.advance(61)
    edited = source.get_templates(["rsi_v1"])["rsi_v1"]
    assert edited is not first
    assert [(p.suffix, p.message) for p in edited.problems(BASIC)] == [
        (".request.theme", "'blue' must be one of light, dark")
    ]
    assert checked == ["dark", "blue"]


def test_unreachable_firestore_raises_transient_error(
    unreachable_firestore_client: firestore.Client, unavailable_firestore: BrokenFirestore
) -> None:
    source = FirestoreTemplateSource(unreachable_firestore_client, rpc_timeout=2.0, clock=SYSTEM_CLOCK)

    with pytest.raises(TransientStoreError, match="chart_templates rsi_v1: Firestore unavailable"):
        source.get_templates(["rsi_v1"])
    assert unavailable_firestore.gave_up_within(2.0)


def test_unsafe_ids_are_never_looked_up(firestore_client: firestore.Client) -> None:
    counting = CountingClient(firestore_client)
    source = FirestoreTemplateSource(counting, clock=SYSTEM_CLOCK)  # type: ignore[arg-type]

    assert source.get_templates(["../flow_runs", "a/b", ""]) == {}
    assert counting.get_all_calls == []


# --- templates sync --------------------------------------------------------------------------


def write_templates(directory: Path, *templates: dict[str, Any], names: list[str] | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, document in enumerate(templates):
        name = names[index] if names else f"{document['id']}.json"
        (directory / name).write_text(json.dumps(document, indent=2), encoding="utf-8")


def test_sync_creates_then_leaves_unchanged_then_updates(
    firestore_client: firestore.Client, tmp_path: Path
) -> None:
    write_templates(tmp_path, template("rsi_v1"), template("macd_v1", version=2, tags=["momentum"]))

    created = sync_templates(tmp_path, firestore_client)

    assert created.ok
    assert dict(created.actions) == {"rsi_v1": SyncAction.CREATED, "macd_v1": SyncAction.CREATED}
    assert stored_templates(firestore_client) == {
        "rsi_v1": template("rsi_v1"),
        "macd_v1": template("macd_v1", version=2, tags=["momentum"]),
    }
    update_times = {s.id: s.update_time for s in firestore_client.collection(COLLECTION).stream()}

    again = sync_templates(tmp_path, firestore_client)

    assert dict(again.actions) == {"rsi_v1": SyncAction.UNCHANGED, "macd_v1": SyncAction.UNCHANGED}
    assert {s.id: s.update_time for s in firestore_client.collection(COLLECTION).stream()} == update_times

    changed = template("rsi_v1", request={"theme": "light"})  # a full overwrite drops old keys
    write_templates(tmp_path, changed)
    updated = sync_templates(tmp_path, firestore_client)

    assert dict(updated.actions) == {"rsi_v1": SyncAction.UPDATED, "macd_v1": SyncAction.UNCHANGED}
    assert stored_templates(firestore_client)["rsi_v1"] == changed
    text = updated.to_text()
    assert "rsi_v1: updated" in text
    assert "macd_v1: unchanged" in text


def test_dry_run_reports_without_writing(firestore_client: firestore.Client, tmp_path: Path) -> None:
    write_templates(tmp_path, template("rsi_v1"))
    firestore_client.collection(COLLECTION).document("orphan_v1").set(template("orphan_v1"))

    report = sync_templates(tmp_path, firestore_client, dry_run=True)

    assert dict(report.actions) == {"rsi_v1": SyncAction.CREATED}
    assert report.not_in_directory == ("orphan_v1",)
    assert set(stored_templates(firestore_client)) == {"orphan_v1"}
    assert "rsi_v1: would be created" in report.to_text()
    assert "orphan_v1: in Firestore only" in report.to_text()


def test_one_invalid_file_means_nothing_is_written(
    firestore_client: firestore.Client, tmp_path: Path
) -> None:
    bad_height = template("bad_v1")
    bad_height["request"]["height"] = 5000
    write_templates(
        tmp_path,
        template("good_v1"),
        bad_height,
        template("other_v1"),
        names=["good_v1.json", "bad_v1.json", "renamed.json"],
    )
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")

    report = sync_templates(tmp_path, firestore_client)

    assert not report.ok
    assert report.actions == {}
    assert stored_templates(firestore_client) == {}
    problems = {(p.file, p.path) for p in report.problems}
    assert ("bad_v1.json", "$.request.height") in problems
    assert ("renamed.json", "$.id") in problems
    assert ("broken.json", "$") in problems
    assert not any(p.file == "good_v1.json" for p in report.problems)
    text = report.to_text()
    assert "bad_v1.json: $.request.height: 5000 exceeds the BASIC plan's maximum 600" in text
    assert "(checked against the BASIC plan); nothing was written" in text


def drawing(**fields: Any) -> dict[str, Any]:
    return {"name": "Horizontal Line", "input": {"price": 100}, **fields}


@pytest.mark.parametrize(
    ("request_change", "path", "message"),
    [
        ({"width": 399}, "$.request.width", "399 is below CHART-IMG's minimum 400"),
        ({"height": 299}, "$.request.height", "299 is below CHART-IMG's minimum 300"),
        ({"width": 1920}, "$.request.width", "1920 exceeds the BASIC plan's maximum 800"),
        ({"height": 601}, "$.request.height", "601 exceeds the BASIC plan's maximum 600"),
        (
            {"scale": {"mode": "log"}},
            "$.request.scale",
            "{'mode': 'log'} must be one of the strings regular, percent, indexedTo100, logarithmic",
        ),
        (
            {"drawings": [{"name": "Horizontal Line"}]},
            "$.request.drawings[0].input",
            "missing: CHART-IMG requires a drawing's input object",
        ),
        (
            {"drawings": [drawing(zOrder="front")]},
            "$.request.drawings[0].zOrder",
            "'front' must be one of top, bottom",
        ),
        (
            {"drawings": [drawing(), drawing(), drawing()]},
            "$.request.drawings",
            "1 studies + 3 drawings = 4 exceed the BASIC plan's parameter limit 3",
        ),
    ],
)
def test_sync_refuses_what_chart_img_would_refuse_naming_the_field(
    firestore_client: firestore.Client,
    tmp_path: Path,
    request_change: dict[str, Any],
    path: str,
    message: str,
) -> None:
    bad = template("bad_v1")
    bad["request"].update(request_change)
    write_templates(tmp_path, template("good_v1"), bad)

    report = sync_templates(tmp_path, firestore_client)

    assert not report.ok and report.actions == {}
    assert stored_templates(firestore_client) == {}
    assert [(p.file, p.path) for p in report.problems] == [("bad_v1.json", path)]  # one line per field
    assert f"bad_v1.json: {path}: {message}" in report.to_text()


def big_template() -> dict[str, Any]:
    """1920x1080: PRO and above."""
    big = template("big_v1")
    big["request"].update(width=1920, height=1080)
    return big


def on_the_emulator(monkeypatch: pytest.MonkeyPatch, emulator: FirestoreEmulator) -> None:
    """The CLI's environment: the emulator, and no CHART_IMG_PLAN."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", emulator.host)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", emulator.project)
    monkeypatch.delenv("CHART_IMG_PLAN", raising=False)


def test_the_plan_changes_the_verdict(
    firestore_emulator: FirestoreEmulator,
    firestore_client: firestore.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker_chart_export.cli.main import main

    big = big_template()
    write_templates(tmp_path, big)
    on_the_emulator(monkeypatch, firestore_emulator)

    refused = main(["templates", "sync", "--dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert refused == EXIT_INVALID
    assert "big_v1.json: $.request.width: 1920 exceeds the BASIC plan's maximum 800" in text
    assert "big_v1.json: $.request.height: 1080 exceeds the BASIC plan's maximum 600" in text
    assert stored_templates(firestore_client) == {}

    monkeypatch.setenv("CHART_IMG_PLAN", "PRO")
    accepted = main(["templates", "sync", "--dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert accepted == EXIT_OK, text
    assert "(checked against the PRO plan)" in text and "big_v1: created" in text
    assert stored_templates(firestore_client) == {"big_v1": big}


def test_the_best_configured_plan_decides_and_templates_only_some_accounts_serve_are_named(
    firestore_emulator: FirestoreEmulator,
    firestore_client: firestore.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 26: a BASIC and a PRO account, no CHART_IMG_PLAN: a 1920x1080 template is valid
    (the PRO account serves it), and the report says the BASIC account cannot."""
    from worker_chart_export.cli.main import main

    write_templates(tmp_path, big_template(), template("rsi_v1"))
    accounts = [
        {"id": "basic", "apiKey": new_key(), "plan": "BASIC"},
        {"id": "pro", "apiKey": new_key(), "plan": "PRO"},
    ]
    monkeypatch.setenv("CHART_IMG_ACCOUNTS_JSON", json.dumps(accounts))
    on_the_emulator(monkeypatch, firestore_emulator)

    assert main(["templates", "sync", "--dir", str(tmp_path), "--dry-run"]) == EXIT_OK
    dry = capsys.readouterr().out
    assert "(checked against the PRO plan)" in dry
    assert "  big_v1: valid (only pro PRO can serve it; not basic BASIC)" in dry.splitlines()
    assert "  rsi_v1: valid" in dry.splitlines()

    assert main(["templates", "sync", "--dir", str(tmp_path)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "  big_v1: created (only pro PRO can serve it; not basic BASIC)" in text.splitlines()
    assert "  rsi_v1: created" in text.splitlines()
    assert set(stored_templates(firestore_client)) == {"big_v1", "rsi_v1"}


def test_run_templates_sync_for_the_cli(
    firestore_emulator: FirestoreEmulator, firestore_client: firestore.Client, tmp_path: Path
) -> None:
    write_templates(tmp_path, template("rsi_v1"))

    code, text = run_templates_sync(tmp_path, firestore_emulator.project, False)

    assert code == EXIT_OK, text
    assert "rsi_v1: created" in text
    assert set(stored_templates(firestore_client)) == {"rsi_v1"}

    (tmp_path / "rsi_v1.json").write_text(json.dumps(template("rsi_v1", extra=1)), encoding="utf-8")
    code, text = run_templates_sync(tmp_path, firestore_emulator.project, False)

    assert code == EXIT_INVALID
    assert "rsi_v1.json: $.extra: is not allowed here (allowed: id, description," in text
    assert stored_templates(firestore_client)["rsi_v1"] == template("rsi_v1")


@pytest.mark.emulators
def test_templates_sync_console_command_loads_the_repo_templates(
    firestore_client: Any, firestore_emulator: Any
) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    command = [
        str(Path(sys.executable).parent / "worker-chart-export"),
        "templates",
        "sync",
        "--dir",
        str(repo / "chart-templates"),
    ]
    env = {
        **os.environ,
        "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        "GOOGLE_CLOUD_PROJECT": firestore_emulator.project,
    }
    first = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    assert "5 template(s): 5 created, 0 updated, 0 unchanged" in first.stdout
    stored = {doc.id for doc in firestore_client.collection("chart_templates").stream()}
    assert {
        "price_psar_adi_v1",
        "price_ema_volume_v1",
        "momentum_rsi_macd_v1",
        "my_tradingview_layout_v1",
    } <= stored
    second = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert second.returncode == 0
    assert "5 template(s): 0 created, 0 updated, 5 unchanged" in second.stdout
