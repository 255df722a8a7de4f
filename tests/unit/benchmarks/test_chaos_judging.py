"""benchmarks/chaos/judging.py and targets.py: a chart is judged by the digest its PNG carries
against the template versions its execution may have read; a FAILED step is explained only
by a window that met it; the targets hold the figures to issue 27's numbers; counting reads a
step's manifest through the worker's one reader."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from harness.builders import REPO
from worker_chart_export.core.step.manifest_reader import ManifestUnreadable, ReadManifest, manifest_of
from worker_chart_export.tools.devstack.processes import StackError

sys.path.insert(0, str(REPO / "benchmarks"))

from chaos.counting import read_step_manifest, uncalled_failure, units_in_hand
from chaos.judging import Rendered, Span, Verdict, Version, digest_of, explain, judge, read_from
from chaos.targets import Figures, checks, really_exhausted

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OLD = Version(T0, {"width": 800, "theme": "dark"})
NEW = Version(T0 + timedelta(seconds=60), {"width": 792, "theme": "light"})
SYMBOL, INTERVAL = "BINANCE:C0001USDT", "1h"


def rendered(version: Version | None, *, read_from: datetime, written: datetime) -> Rendered:
    digest = None if version is None else digest_of(version, SYMBOL, INTERVAL)
    return Rendered(digest, [OLD, NEW], SYMBOL, INTERVAL, read_from, written)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_version_current_when_written_is_right() -> None:
    assert judge(rendered(NEW, read_from=at(70), written=at(80))) is Verdict.RIGHT
    assert judge(rendered(OLD, read_from=at(10), written=at(20))) is Verdict.RIGHT


def test_an_older_version_the_execution_may_have_cached_is_stale_not_wrong() -> None:
    assert judge(rendered(OLD, read_from=at(10), written=at(80))) is Verdict.STALE


def test_an_older_version_no_read_of_the_execution_could_return_is_wrong() -> None:
    """The issue-25 case: the retry's instance started after the edit, yet the old PNG came back."""
    assert judge(rendered(OLD, read_from=at(65), written=at(80))) is Verdict.WRONG


def test_another_symbol_or_no_digest_at_all_is_wrong() -> None:
    other = Rendered(
        digest_of(NEW, "BINANCE:C0002USDT", INTERVAL), [OLD, NEW], SYMBOL, INTERVAL, at(70), at(80)
    )
    assert judge(other) is Verdict.WRONG
    assert judge(rendered(None, read_from=at(70), written=at(80))) is Verdict.WRONG


def test_what_an_execution_may_have_read_starts_at_the_cache_or_the_instance() -> None:
    claimed = at(400)
    assert read_from(claimed, None) == at(100)
    assert read_from(claimed, at(50)) == at(100)
    assert read_from(claimed, at(350)) == at(350)


def test_a_failed_step_is_explained_only_by_what_met_it() -> None:
    refuse = Span("refuse#1", "refuse", at(10), at(20))
    pause = Span("firestore_pause#1", "firestore_pause", at(30), at(35))
    throttle = Span("throttle#1", "throttle", at(100), at(160))  # and its keys' cooldowns, 30 s on
    spans = [refuse, pause, throttle]
    assert explain((at(0), at(5)), [], [], spans) == []
    assert explain((at(15), at(32)), [], [], spans) == ["firestore_pause#1", "refuse#1"]
    assert explain((at(40), at(50)), ["throttle#1"], ["instance_kill#2"], spans) == [
        "instance_kill#2",
        "throttle#1",  # by the call it answered
    ]
    # a chart failed without a call: every key still cooling, up to 30 s after the throttle
    assert explain((at(185), at(189)), [], [], spans, uncalled=True) == ["throttle#1"]
    assert explain((at(191), at(195)), [], [], spans, uncalled=True) == []
    assert explain((at(120), at(125)), [], [], spans) == []  # its calls were made: they name it


def manifest_document(*failed: str) -> dict[str, object]:
    """A manifest as the worker writes it, whose `failed` templates failed."""
    return {
        "schemaVersion": 1,
        "runId": "run1",
        "stepId": "charts",
        "createdAt": "2026-11-22T12:00:00.000Z",
        "symbol": "C0001USDT",
        "timeframe": "1h",
        "minImages": 1,
        "requested": [{"chartTemplateId": t} for t in failed or ("a",)],
        "items": [],
        "failures": [
            {"request": {"chartTemplateId": t}, "error": {"code": "CHART_API_FAILED", "message": "HTTP 500"}}
            for t in failed
        ],
    }


def failing(*templates: str) -> ReadManifest:
    return manifest_of(manifest_document(*templates), "manifest.json")


def test_a_chart_chart_img_was_never_asked_for_failed_without_a_call() -> None:
    manifest = failing("a", "b")
    assert not uncalled_failure(manifest, {"a", "b", "c"})  # each failed chart was called
    assert uncalled_failure(manifest, {"a"})  # b never reached CHART-IMG (abandoned, keys cooling)
    assert not uncalled_failure(None, set()) and not uncalled_failure(failing(), set())


class Bucket:
    """The one call read_step_manifest makes of the stack: read_object, as LocalStack answers."""

    bucket = "stack-charts-1"

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def read_object(self, name: str) -> bytes:
        if name not in self.objects:
            raise StackError(f"reading gs://{self.bucket}/{name}: HTTP 404")
        return self.objects[name]


def test_a_steps_manifest_is_read_by_the_workers_reader_and_none_when_absent() -> None:
    written = json.dumps(manifest_document("a")).encode()
    stack = Bucket({"charts/run1/charts/manifest.json": written, "charts/run2/charts/manifest.json": b"{"})
    assert read_step_manifest(stack, "run1") == failing("a")  # type: ignore[arg-type]
    assert read_step_manifest(stack, "run3") is None  # type: ignore[arg-type]
    with pytest.raises(
        ManifestUnreadable, match=r"^gs://stack-charts-1/charts/run2/charts/manifest.json: not JSON"
    ):
        read_step_manifest(stack, "run2")  # type: ignore[arg-type]  # a finding, never "no manifest"


def figures(**values: object) -> Figures:
    made = Figures(seed=1, profile="short", delivered=9, units={"a": 5, "b": 4}, calls={"a": 5, "b": 4})
    for name, value in values.items():
        setattr(made, name, value)
    return made


def failed_targets(made: Figures) -> list[str]:
    return [
        check.target.split(" ")[0] + " " + check.target.split(" ")[1]
        for check in checks(made)
        if not check.ok
    ]


def test_a_clean_run_meets_every_target() -> None:
    assert [
        check for check in checks(figures(calls_by_window=Counter({"throttle": 1}))) if not check.ok
    ] == []


def test_each_target_can_be_missed() -> None:
    assert failed_targets(figures(units={"a": 6, "b": 4})) == ["units =="]
    # an exhausted key too: its exhaustion is a field of its own, its count the units spent
    assert failed_targets(figures(units={"a": 50, "b": 4}, really_exhausted=["a"])) == ["units =="]
    assert failed_targets(figures(delivered=6)) == ["calls /"]
    assert failed_targets(figures(wrong=["run/t"])) == ["0 wrong"]
    assert failed_targets(figures(stuck=["run READY"])) == ["0 steps"]
    assert failed_targets(figures(set_aside_end={"b": "exhausted until 00:00:00"})) == ["no key"]
    assert failed_targets(figures(set_aside_end={"a": "full"}, really_exhausted=["a"])) == []
    assert failed_targets(figures(set_aside_end={"b": "cooling until 12:00:03"})) == []
    assert failed_targets(figures(failed={"run": ("CHART_API_FAILED", [])})) == ["every FAILED"]
    assert failed_targets(figures(failed={"run": ("CHART_API_FAILED", ["refuse#1"])})) == []


def test_only_units_a_killed_instance_held_as_it_died_may_exceed_the_calls() -> None:
    """a: 2 units more than calls, its killed instance held 2 (or 3: some of them had left)
    as it died: within the target. 3 more than the 2 held, or fewer units than calls (a
    call with no unit counted), or units beyond calls on a key no killed instance held:
    missed."""
    assert failed_targets(figures(units={"a": 7, "b": 4}, held_at_kills={"a": 2})) == []
    assert failed_targets(figures(units={"a": 7, "b": 4}, held_at_kills={"a": 3})) == []
    assert failed_targets(figures(units={"a": 8, "b": 4}, held_at_kills={"a": 2})) == ["units =="]
    assert failed_targets(figures(units={"a": 4, "b": 4}, held_at_kills={"a": 2})) == ["units =="]
    assert failed_targets(figures(units={"a": 5, "b": 5}, held_at_kills={"a": 2})) == ["units =="]


def test_the_units_in_hand_are_read_from_the_lines_that_take_and_account_for_them() -> None:
    """Taken: a first wave's units, an attempt's own; accounted for: an attempt's end
    (answered, or never left and given back) and a prepaid lease dropped. A drop whose unit
    could not be given back stays counted for no call, but not because of a kill: it is not
    in hand, so it cannot excuse a count above the calls."""
    lines = [
        {"message": "chart-img first wave reserved", "units": {"a": 2, "b": 1}},
        {"message": "chart api attempt started", "accountId": "a", "prepaid": True},
        {"message": "chartsApi.request", "accountId": "a"},
        {"message": "chart-img prepaid lease dropped", "accountId": "b", "unitGivenBack": True},
        {"message": "chart api attempt started", "accountId": "b"},  # its own unit, in flight
        {"message": "chart-img prepaid lease dropped", "accountId": "a", "unitGivenBack": False},
        {"message": "chart api attempt started", "accountId": "c"},
        {"message": "chartsApi.request", "accountId": "c"},
    ]
    assert units_in_hand(lines) == Counter({"b": 1})
    assert units_in_hand(lines[:1]) == Counter({"a": 2, "b": 1}) and units_in_hand([]) == Counter()


def test_a_key_is_really_exhausted_by_the_stand_ins_count_or_by_our_calls() -> None:
    usage = [
        {"account_id": "spent", "used": 50, "quota": 50},  # another client, or our admitted calls
        {"account_id": "called", "used": 44, "quota": 50},  # 50 calls, 6 of them throttled
        {"account_id": "left", "used": 44, "quota": 50},
        {"account_id": "unlimited", "used": 900, "quota": None},
    ]
    calls = {"spent": 12, "called": 50, "left": 49, "unlimited": 900}
    assert really_exhausted(usage, calls) == ["called", "spent"]
