"""benchmarks/chaos/judging.py and targets.py: a chart is judged against what its step asked,
by the request the stand-in received for it; a step is deliverable by the schedule and the
stand-in's books, and lost unless SUCCEEDED with its charts; the targets hold the figures to
issue 37's numbers; counting reads a step's manifest through the worker's one reader."""

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

from chaos.counting import read_step_manifest, received_by_digest, reserving_at_death, units_in_hand
from chaos.judging import (
    Asked,
    Judgement,
    Received,
    Span,
    StepAsked,
    Verdict,
    Version,
    chart_img_symbol,
    judge,
    outcome,
    undeliverable,
)
from chaos.targets import Figures, checks

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SYMBOL, INTERVAL, TEMPLATE = "BINANCE:C0001USDT", "1h", "price_psar_adi_v1"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


VERSIONS = [
    Version("initial", at(0)),
    Version("template_edit#1", at(60)),
    Version("template_edit#3", at(120)),
]


def asked(claimed: float) -> Asked:
    return Asked(TEMPLATE, SYMBOL, INTERVAL, at(claimed))


def received(version: str, arrived: float, **other: str) -> list[Received]:
    fields = {"template": TEMPLATE, "symbol": SYMBOL, "interval": INTERVAL, **other}
    return [Received(fields["template"], version, fields["symbol"], fields["interval"], at(arrived))]


def test_the_version_current_at_the_claim_is_right() -> None:
    assert judge(asked(10), received("initial", 11), VERSIONS) == Judgement(Verdict.RIGHT)
    assert judge(asked(70), received("template_edit#1", 71), VERSIONS) == Judgement(Verdict.RIGHT)
    # PNGs an earlier claim paid for, reused by a later one before any edit: still current
    assert judge(asked(100), received("template_edit#1", 65), VERSIONS) == Judgement(Verdict.RIGHT)


def test_a_version_written_between_the_claim_and_the_request_is_right() -> None:
    """A read after the claim sees the edit: the newer body is no error."""
    assert judge(asked(59), received("template_edit#1", 61), VERSIONS) == Judgement(Verdict.RIGHT)


def test_a_version_older_than_the_one_current_at_the_claim_is_stale_and_wrong() -> None:
    """No template cache any more: the next claim after an edit must use it."""
    judged = judge(asked(61), received("initial", 62), VERSIONS)
    assert judged.verdict is Verdict.WRONG
    assert (
        judged.why == "stale: drawn from version 'initial', older than 'template_edit#1' current at its claim"
    )
    # a PNG an earlier claim paid for, reused after an edit: stale too
    assert judge(asked(130), received("template_edit#1", 70), VERSIONS).verdict is Verdict.WRONG


def test_another_symbol_interval_or_template_is_wrong_naming_what_differs() -> None:
    other = judge(asked(10), received("initial", 11, symbol="BINANCE:C0002USDT"), VERSIONS)
    assert other == Judgement(Verdict.WRONG, "symbol 'BINANCE:C0002USDT', asked 'BINANCE:C0001USDT'")
    assert (
        judge(asked(10), received("initial", 11, interval="4h"), VERSIONS).why == "interval '4h', asked '1h'"
    )
    swapped = judge(asked(10), received("initial", 11, template="momentum_rsi_macd_v1"), VERSIONS)
    assert swapped.why == "template 'momentum_rsi_macd_v1', asked 'price_psar_adi_v1'"


def test_a_png_no_request_the_stand_in_answered_carries_is_wrong() -> None:
    judged = judge(asked(10), [], VERSIONS)
    assert judged == Judgement(Verdict.WRONG, "no request the stand-in answered carries its digest")


def test_the_expected_symbol_is_the_producers_through_the_templates_pattern() -> None:
    assert chart_img_symbol("BYBIT:{symbol}.P", "C0001USDT") == "BYBIT:C0001USDT.P"
    assert chart_img_symbol("BINANCE:{symbol}", "C0001USDT") == SYMBOL


def test_the_requests_a_png_may_be_drawn_for_are_the_stand_ins_200s_by_digest() -> None:
    calls = [
        {"status": 200, "digest": "d1", "template": TEMPLATE, "template_version": "initial",
         "symbol": SYMBOL, "interval": INTERVAL, "wall": at(5).timestamp()},
        {"status": 500, "digest": "d2", "template": TEMPLATE, "template_version": "initial",
         "symbol": SYMBOL, "interval": INTERVAL, "wall": at(6).timestamp()},
    ]  # fmt: skip
    assert received_by_digest(calls) == {"d1": received("initial", 5)}


TEMPLATES = ("t_a", "t_b", "t_c", "t_refused")


def step(ended: float, *, min_images: int = 3, templates: tuple[str, ...] = TEMPLATES) -> StepAsked:
    return StepAsked(templates, min_images, at(0), at(ended))


def why_not(asked: StepAsked, *, exhausted: dict[str, datetime | None] | None = None, spans=()) -> str | None:  # type: ignore[no-untyped-def]
    return undeliverable(
        asked,
        refused_templates={"t_refused"},
        exhausted_at=exhausted if exhausted is not None else {"k1": None, "k2": at(5)},
        spans=list(spans),
        patience_seconds=650.0,  # the fleet's: 430 s of waits, 10 attempts of 22 s
    )


def test_a_step_is_deliverable_when_chart_img_renders_min_images_of_its_templates() -> None:
    assert why_not(step(30)) is None  # t_a, t_b, t_c: 3 of minImages 3
    assert why_not(step(30, min_images=4)) == (
        "its requests: CHART-IMG renders 3 of its 4 templates, fewer than minImages 4"
    )


def test_a_step_is_not_deliverable_once_every_key_was_used_up_before_it_ended() -> None:
    spent = {"k1": at(20), "k2": at(5)}
    assert why_not(step(30), exhausted=spent) == "real exhaustion: every key's day used up by 12:00:20"
    assert why_not(step(10), exhausted=spent) is None  # k1 still had units when it ended


def test_only_a_window_longer_than_the_steps_attempts_allow_excuses_it() -> None:
    outage = Span("outage#1", "outage", at(10), at(310))  # 300 s: the attempts' 650 s outlast it
    endless = Span("outage#2", "outage", at(10), at(700))
    throttle_for_ever = Span("template_401#1", "template_401", at(0), None)  # lasting: no length
    assert why_not(step(400), spans=[outage, throttle_for_ever]) is None
    assert why_not(step(400), spans=[endless]) == "a window longer than its attempts allow (650 s): outage#2"
    assert why_not(step(5), spans=[endless]) is None  # never met it


def test_what_the_user_got_is_delivered_only_with_a_whole_manifest() -> None:
    assert outcome("SUCCEEDED", 3, 3, {}) is None
    assert outcome("SUCCEEDED", None, 3, {}) == "SUCCEEDED without its manifest"
    assert outcome("SUCCEEDED", 2, 3, {}) == "SUCCEEDED with 2 items, fewer than minImages 3"
    failed = outcome("FAILED", 1, 3, {"code": "CHART_API_FAILED", "message": "1 of 4 charts rendered"})
    assert failed == "FAILED CHART_API_FAILED: 1 of 4 charts rendered"
    assert outcome("RUNNING", None, 3, {}) == "left RUNNING"


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
    made = Figures(
        seed=1,
        profile="short",
        delivered=9,
        deliverable=3,
        units={"a": 5, "b": 4},
        charged={"a": 5, "b": 4},
        calls={"a": 6, "b": 4},
        calls_by_window=Counter({"throttle": 1}),
    )
    for name, value in values.items():
        setattr(made, name, value)
    return made


def failed_targets(made: Figures) -> list[str]:
    return [" ".join(check.target.split(" ")[:2]) for check in checks(made) if not check.ok]


def test_a_clean_run_meets_every_target() -> None:
    assert [check for check in checks(figures()) if not check.ok] == []
    assert [check for check in checks(figures(outage="outage#1 300 s", outage_met=2)) if not check.ok] == []


def test_each_target_can_be_missed() -> None:
    assert failed_targets(figures(lost=["run: FAILED CHART_API_FAILED: ..."])) == ["deliverable steps"]
    assert failed_targets(figures(misses=["run: SUCCEEDED without its manifest"])) == ["0 SUCCEEDED"]
    assert failed_targets(figures(units={"a": 6, "b": 4})) == ["units =="]
    # a key spent by another client: its units are ours, as the stand-in charged us
    assert failed_targets(figures(units={"a": 50, "b": 4}, really_exhausted=["a"])) == ["units =="]
    assert failed_targets(figures(units={"a": 4, "b": 4})) == ["units =="]  # a 429 counted... or not
    assert failed_targets(figures(delivered=4)) == ["calls /"]
    assert failed_targets(figures(wrong=["run/t: stale: ..."])) == ["0 wrong"]
    assert failed_targets(figures(stuck=["run READY"])) == ["0 steps"]
    assert failed_targets(figures(set_aside_end={"b": "exhausted until 00:00:00"})) == ["no key"]
    assert failed_targets(figures(set_aside_end={"a": "full"}, really_exhausted=["a"])) == []
    # the 429-streak rule's set-aside (coolUntil: 15 minutes, then a probe) is a key set aside
    assert failed_targets(figures(set_aside_end={"b": "cooling until 12:15:03"})) == ["no key"]
    outage = {"outage": "outage#1 300 s", "outage_met": 2}
    assert failed_targets(figures(**outage, outage_lost=["run: FAILED ..."])) == ["every deliverable"]


def test_only_units_a_killed_instance_held_as_it_died_may_exceed_what_was_charged() -> None:
    """a: 2 units more than charged, its killed instances held 2 between them (or 3: some
    had left) as they died: within the target. 3 more than the 2 held, or fewer units than
    charged (a charged call with no unit counted), or units beyond the charge on a key no
    killed instance held: missed."""
    two = {"worker-0.1": {"a": 1}, "worker-2.1": {"a": 1, "b": 0}}
    assert failed_targets(figures(units={"a": 7, "b": 4}, held_at_kills=two)) == []
    assert failed_targets(figures(units={"a": 7, "b": 4}, held_at_kills={"worker-0.1": {"a": 3}})) == []
    assert failed_targets(figures(units={"a": 8, "b": 4}, held_at_kills=two)) == ["units =="]
    assert failed_targets(figures(units={"a": 4, "b": 4}, held_at_kills=two)) == ["units =="]
    assert failed_targets(figures(units={"a": 5, "b": 5}, held_at_kills=two)) == ["units =="]


def test_past_the_units_held_all_keys_together_may_exceed_by_what_the_killed_were_reserving() -> None:
    """A commit sent by an instance killed before its answer may land: the account unknown,
    the units its log says it may have been reserving cover the excess of every key together,
    never a key below its charge."""
    one = {"worker-0.1": {}}
    assert (
        failed_targets(figures(units={"a": 6, "b": 5}, held_at_kills=one, reserving_at_kills={"w": 2})) == []
    )
    assert failed_targets(
        figures(units={"a": 6, "b": 5}, held_at_kills=one, reserving_at_kills={"w": 1})
    ) == ["units =="]
    assert failed_targets(figures(units={"a": 7, "b": 3}, reserving_at_kills={"w": 4})) == ["units =="]


def test_what_a_killed_instance_may_have_been_reserving_is_read_from_its_steps_unfinished_charts() -> None:
    """Each claimed step not handled to its end: a unit for each chart neither finished nor
    holding one (an open attempt, or its first wave's unit)."""
    lines = [
        {"message": "claim succeeded", "runId": "r1"},  # 4 charts, none started: its wave may be in flight
        {"message": "claim succeeded", "runId": "r2"},
        {"message": "chart-img first wave reserved", "runId": "r2", "units": {"a": 2}},
        {"message": "chart reused", "runId": "r2"},
        {"message": "chart api attempt started", "runId": "r2", "prepaid": True},
        {"message": "chartsApi.request", "runId": "r2"},
        # r2: 2 charts left, one of them holding the wave's unused unit
        {"message": "chart api call finished", "runId": "r2"},
        {"message": "claim succeeded", "runId": "r3"},
        {"message": "event handled", "runId": "r3"},  # done: nothing in flight
        {"message": "chart api attempt started", "runId": "r9"},  # not claimed here: not counted
    ]
    assert reserving_at_death(lines, {"r1": 4, "r2": 4, "r3": 4}) == 4 + 1
    assert reserving_at_death(lines[:2], {"r1": 4, "r2": 3}) == 7 and reserving_at_death([], {}) == 0


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
