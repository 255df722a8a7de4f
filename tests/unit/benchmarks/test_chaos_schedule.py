"""benchmarks/chaos/schedule.py: the seeded schedule of bad luck is replayable by its seed,
holds every kind issue 27 lists (and the full mode issue 37's outage, which no other window
meets), and never lets one kind's windows overlap."""

from __future__ import annotations

import sys
from itertools import combinations, pairwise

import pytest

from harness.builders import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from chaos.schedule import FULL, SHORT, Kind, Profile, Schedule, build_schedule, edited_request

ACCOUNTS = [f"acct{i}" for i in range(10)]
TEMPLATES = ["t_a", "t_b", "t_c", "t_d"]
REFUSED = "t_refused"


def schedule(seed: int, profile: Profile = FULL) -> Schedule:
    return build_schedule(
        seed, profile, accounts=ACCOUNTS, templates=TEMPLATES, refused_template=REFUSED, instances=3
    )


@pytest.mark.parametrize("profile", [FULL, SHORT], ids=lambda p: p.name)
def test_the_same_seed_gives_the_same_schedule(profile: Profile) -> None:
    assert schedule(7, profile).to_json() == schedule(7, profile).to_json()


def test_another_seed_gives_another_schedule() -> None:
    assert schedule(1).to_json()["windows"] != schedule(2).to_json()["windows"]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("profile", [FULL, SHORT], ids=lambda p: p.name)
def test_every_kind_is_there_and_one_kind_never_overlaps_itself(seed: int, profile: Profile) -> None:
    built = schedule(seed, profile)
    assert {w.kind for w in built.windows} == set(Kind) - ({Kind.OUTAGE} if profile.outage is None else set())
    for kind in Kind:
        windows = sorted(built.of_kind(kind), key=lambda w: w.start)
        assert [w.number for w in windows] == list(range(1, len(windows) + 1))
        for first, second in combinations(windows, 2):
            if kind is not Kind.TEMPLATE_EDIT:
                assert first.end < second.start, (first, second)
    latest = profile.duration * (1 - profile.calm_tail)
    for window in built.windows:
        assert 0 <= window.start <= window.end <= profile.duration
        if window.kind not in (Kind.TEMPLATE_401, Kind.KEY_EXHAUSTED):
            assert window.end <= latest, window  # the tail of the schedule is calm


def test_the_full_profile_holds_a_throttle_over_a_minute() -> None:
    """Issue 26: a minute of CHART-IMG-wide 429s is the bad luck that retired every key."""
    for seed in range(10):
        assert max(w.end - w.start for w in schedule(seed).of_kind(Kind.THROTTLE)) > 60


@pytest.mark.parametrize("seed", range(20))
def test_the_full_mode_has_an_outage_of_minutes_that_no_other_window_meets(seed: int) -> None:
    """Issue 37: a window longer than a step's budget (30 s), a step's patience outlasts it."""
    built = schedule(seed)
    (outage,) = built.of_kind(Kind.OUTAGE)
    assert 290 <= outage.end - outage.start <= 310
    ranged = [
        w for w in built.windows if w.end > w.start and w.kind not in (Kind.TEMPLATE_401, Kind.KEY_EXHAUSTED)
    ]
    assert [w.name for w in ranged if w is not outage and w.overlaps(outage.start, outage.end)] == []
    long_throttles = [w for w in built.of_kind(Kind.THROTTLE) if w.end - w.start > 60]
    assert len(long_throttles) == 1  # the full mode's minute of 429s found room beside it
    assert len(built.of_kind(Kind.REFUSE)) == 2 and len(built.of_kind(Kind.INSTANCE_KILL)) == 4
    assert schedule(seed, SHORT).of_kind(Kind.OUTAGE) == []


def test_targets_name_an_instance_an_account_and_templates() -> None:
    built = schedule(3)
    assert all(w.target in {"worker-0", "worker-1", "worker-2"} for w in built.of_kind(Kind.INSTANCE_KILL))
    assert next(w.target for w in built.of_kind(Kind.KEY_EXHAUSTED)) in ACCOUNTS
    assert all(w.target in TEMPLATES for w in built.of_kind(Kind.TEMPLATE_EDIT))
    assert [w.target for w in built.of_kind(Kind.TEMPLATE_401)] == [REFUSED]


def test_traffic_is_steady_with_unique_symbols_and_some_refused_templates() -> None:
    built = schedule(5)
    runs = built.runs
    assert len(runs) == FULL.runs
    assert len({r.symbol for r in runs}) == len(runs)
    gaps = {round(b.at - a.at, 2) for a, b in pairwise(runs)}
    assert max(gaps) - min(gaps) <= 0.02
    assert all(len(r.templates) == len(TEMPLATES) for r in runs)
    refused = [r for r in runs if REFUSED in r.templates]
    assert 0.05 * len(runs) < len(refused) < 0.3 * len(runs)


def test_actions_come_in_time_order_and_instants_only_start() -> None:
    built = schedule(11)
    actions = built.actions()
    assert [a[0] for a in actions] == sorted(a[0] for a in actions)
    assert not [a for a in actions if a[2].kind is Kind.TEMPLATE_EDIT and a[1] == "end"]
    kills = [a for a in actions if a[2].kind is Kind.INSTANCE_KILL]
    assert len(kills) == 2 * len(built.of_kind(Kind.INSTANCE_KILL))


def test_a_window_meets_what_it_overlaps() -> None:
    window = schedule(1).of_kind(Kind.REFUSE)[0]
    assert window.overlaps(window.start - 5, window.start)
    assert window.overlaps(window.end, window.end + 5)
    assert not window.overlaps(window.end + 0.1, window.end + 5)
    assert window.name == "refuse#1"


def test_an_edit_changes_the_request_and_stays_within_every_plan() -> None:
    request = {"width": 800, "height": 600, "theme": "dark", "studies": []}
    first = edited_request(request, 1)
    second = edited_request(first, 2)
    assert first == {**request, "width": 792, "theme": "light"}
    assert second == {**request, "width": 784, "theme": "light"}
    assert edited_request({"width": 400, "theme": "light"}, 1) == {"width": 400, "theme": "dark"}
