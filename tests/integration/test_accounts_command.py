"""`worker-chart-export accounts` against the real Firestore emulator, run as a user runs it (the
console script, FIRESTORE_EMULATOR_HOST): the usage documents as the worker's own store writes
them (reservations with pacing, CHART-IMG's quota answer), a stale day, a limit set in a
document, and a key recorded as cooling and refused (Firestore timestamps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore

from harness.firestore_emulator import FirestoreEmulator
from harness.midnight import now_with_room_in_the_day
from harness.secret_scan import TEST_KEY
from worker_chart_export.adapters.firestore import FirestoreUsageStore
from worker_chart_export.core.chart_img.usage import Pacing, window_start
from worker_chart_export.core.clock import SYSTEM_CLOCK

pytestmark = pytest.mark.emulators

SCRIPT = str(Path(sys.executable).parent / "worker-chart-export")
COLLECTION = "chart_img_accounts_usage"
ACCOUNTS = [
    {"id": "basic1", "apiKey": "test-key-11111111111111111111111111111111", "plan": "BASIC"},
    {"id": "pro1", "apiKey": "test-key-22222222222222222222222222222222", "plan": "PRO"},
    {"id": "stale", "apiKey": "test-key-33333333333333333333333333333333"},
    {"id": "capped", "apiKey": "test-key-44444444444444444444444444444444", "plan": "BASIC"},
    {"id": "refused", "apiKey": "test-key-55555555555555555555555555555555"},
]


def accounts_command(emulator: FirestoreEmulator, *argv: str, accounts: list[dict[str, Any]] | None) -> str:
    env = {
        **os.environ,
        "FIRESTORE_EMULATOR_HOST": emulator.host,
        "GOOGLE_CLOUD_PROJECT": emulator.project,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps(accounts) if accounts else "",
    }
    done = subprocess.run([SCRIPT, "accounts", *argv], capture_output=True, text=True, timeout=60, env=env)
    print(done.stdout, done.stderr)  # the suite's key scan reads them too
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not TEST_KEY.search(done.stdout)
    return done.stdout


@pytest.fixture
def usage(firestore_client: firestore.Client) -> datetime:
    """The documents; returns when they were written."""
    store, now = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK), now_with_room_in_the_day()
    for _ in range(5):  # BASIC's burst of 3, then paced at 0.9/s: the next slot is ahead
        store.reserve("basic1", default_limit=50, now=now, pacing=Pacing(0.9, 3, 0.3))
    store.reserve("pro1", default_limit=500, now=now)
    store.mark_exhausted("pro1", now=now)  # CHART-IMG: "Limit Exceeded"
    documents = firestore_client.collection(COLLECTION)
    yesterday = window_start(now - timedelta(days=1))
    documents.document("stale").set({"usageToday": 44, "windowStart": yesterday})
    documents.document("capped").set({"usageToday": 2, "windowStart": window_start(now), "dailyLimit": 5})
    refused = {
        "usageToday": 1,
        "windowStart": window_start(now),
        "disabled": True,
        "disabledReason": "401 twice",
    }
    documents.document("refused").set({**refused, "coolUntil": now + timedelta(minutes=10)})
    documents.document("retired").set({"usageToday": 7, "windowStart": window_start(now)})
    return now


def test_json_shows_each_account_as_its_documents_say(
    firestore_emulator: FirestoreEmulator, usage: datetime
) -> None:
    data = json.loads(accounts_command(firestore_emulator, "--json", accounts=ACCOUNTS))
    assert data["source"] == f"Firestore emulator at {firestore_emulator.host}, {COLLECTION}/"
    rows = {row["accountId"]: row for row in data["accounts"]}
    assert list(rows) == [a["id"] for a in ACCOUNTS]
    basic = rows["basic1"]
    assert (basic["plan"], basic["usedToday"], basic["leftToday"]) == ("BASIC", 5, 45)
    # written within the last seconds: the 5th slot, 2 x 1.11 s after the burst, less the 0.3 s jitter
    assert basic["state"] in ("paced", "free")
    pro = rows["pro1"]
    assert (pro["usedToday"], pro["leftToday"], pro["state"]) == (1, 0, "exhausted")  # 1 unit spent
    assert pro["exhaustedUntil"] == (usage.date() + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00.000Z")
    stale = rows["stale"]
    assert (stale["usedToday"], stale["leftToday"], stale["dailyLimitFrom"], stale["state"]) == (
        0,
        44,
        "default",
        "free",
    )
    capped = rows["capped"]
    assert (capped["dailyLimit"], capped["dailyLimitFrom"], capped["leftToday"]) == (5, "document", 3)
    refused = rows["refused"]
    assert (refused["state"], refused["disabledReason"], refused["nextSlot"]) == (
        "disabled",
        "401 twice",
        None,
    )
    cooling = datetime.fromisoformat(refused["coolingUntil"].replace("Z", "+00:00"))
    assert abs(cooling - (usage + timedelta(minutes=10))) < timedelta(milliseconds=1)  # a Firestore Timestamp
    totals = data["totals"]
    # pro1: the 1 unit spent, its exhaustion a field of its own (not the limit, 500)
    assert (totals["accounts"], totals["usable"], totals["usedToday"]) == (5, 3, 9)
    assert totals["leftToday"] == 45 + 0 + 44 + 3  # the refused key's quota cannot be spent
    assert data["unconfigured"] == ["retired"]


def test_the_table_and_the_documents_without_configuration(
    firestore_emulator: FirestoreEmulator, usage: datetime
) -> None:
    table = accounts_command(firestore_emulator, accounts=ACCOUNTS).splitlines()
    assert [line.split()[0] for line in table[2:7]] == [a["id"] for a in ACCOUNTS]
    assert table[7].startswith("total: 5 account(s), 3 usable, 9 used today of ")
    listed = accounts_command(firestore_emulator, accounts=None).splitlines()
    assert "no accounts configured" in listed[1]
    assert [line.split()[0] for line in listed[3:9]] == sorted(
        ["basic1", "pro1", "stale", "capped", "refused", "retired"]
    )
