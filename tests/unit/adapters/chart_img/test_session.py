"""A step's chart session (adapters/chart_img/session.py): its first wave's leases and its
"exhaustion logged" flag belong to it alone, and go with it. Over the scripted transport
and a FakeClock (scripted.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import SecretStr

from harness.builders import REPO
from harness.chart_img_server import PNG, chart_call
from harness.logs import picked
from unit.adapters.chart_img.scripted import Rig, answer, png
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.usage import ReservationRequest
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import ChartFailure, ChartSuccess, LayoutTarget
from worker_chart_export.testing import InMemoryUsageStore

sys.path.insert(0, str(REPO / "benchmarks"))

from chaos.counting import units_in_hand  # the chaos benchmark's reading of a killed instance's log


def units(r: Rig) -> int:
    return sum(doc["usageToday"] for doc in r.store.snapshot().values())


def free_permits(r: Rig) -> int:
    permits = r.api.client.permits
    taken: int = permits.take_available(permits.size)
    permits.release(taken)
    return taken


def test_two_sessions_of_the_same_step_keep_their_own_leases(rig: Callable[..., Rig]) -> None:
    """A reaped execution finishing late on this instance while the step's retry renders:
    same runId and stepId, and neither touches the other's leases or permits."""
    r = rig([png()], accounts=("acc1", "acc2"))
    calls = [chart_call(f"tpl_{i}") for i in range(2)]  # both executions: run-1 / step-1
    size = r.api.client.permits.size
    late = ExitStack()
    reaped = late.enter_context(r.api.for_step(calls, r.budget()))
    with r.api.for_step(calls, r.budget()) as retry:
        assert units(r) == 4 and len(reaped.prepaid) == len(retry.prepaid) == 2
        assert free_permits(r) == size - 4  # each lease holds its connection
        assert reaped.render(calls[0]) == ChartSuccess(PNG, "acc1")  # its own lease...
        assert len(reaped.prepaid) == 1 and len(retry.prepaid) == 2  # ...not the retry's
        late.close()  # the reaped execution ends while the retry's wave is still open
        assert len(retry.prepaid) == 2 and free_permits(r) == size - 2
        assert units(r) == 3  # the unit of its unused lease given back: it never made a call
        results = [retry.render(call) for call in calls]
        assert results == [ChartSuccess(PNG, "acc1"), ChartSuccess(PNG, "acc2")]
        assert units(r) == 3 and len(r.transport.seen) == 3  # no unit reserved anew
    assert free_permits(r) == size


def test_a_lease_is_taken_once_and_unused_ones_end_with_the_session(rig: Callable[..., Rig]) -> None:
    r = rig([png()], accounts=("acc1", "acc2"))
    calls = [chart_call("tpl_a"), chart_call("tpl_b")]
    with r.api.for_step(calls, r.budget()) as step:
        first = step.take_prepaid(calls[0])
        assert first is not None and len(step.prepaid) == 1
        assert step.take_prepaid(calls[0]) is None  # the call's lease is taken once
        r.api.client.permits.release()  # what the render holding it gives back after its answer
    assert len(step.prepaid) == 0 and free_permits(r) == r.api.client.permits.size
    assert step.take_prepaid(calls[1]) is None  # a render still running after the step reserves anew
    assert units(r) == 1  # the unused lease's unit given back: no call was made with it
    assert sum(doc.get("refundedToday", 0) for doc in r.store.snapshot().values()) == 1


def test_a_lease_on_an_account_refused_since_is_dropped_with_its_permit(rig: Callable[..., Rig]) -> None:
    r = rig([answer(429, "Limit Exceeded"), png()], accounts=("acc1", "acc2"))
    size = r.api.client.permits.size
    calls = [chart_call(f"tpl_{i}") for i in range(2)]
    with r.api.for_step(calls, r.budget()) as step:
        assert [lease.account_id for lease in step.prepaid.values()] == ["acc1", "acc2"]
        r.api.limiter.mark_exhausted("acc1", Answer(429, "Limit Exceeded"))
        assert step.take_prepaid(calls[0]) is None  # on acc1: dropped, the call reserves anew
        lease = step.take_prepaid(calls[1])
        assert lease is not None and lease.account_id == "acc2" and not step.prepaid
        assert free_permits(r) == size - 1  # acc1's permit given back, acc2's held by the lease
        r.api.client.permits.release()
    assert free_permits(r) == size


def test_each_execution_of_a_step_logs_its_exhaustion_once(rig: Callable[..., Rig]) -> None:
    r = rig([answer(429, "Limit Exceeded")], accounts=("acc1",))
    for execution in (1, 2):
        with r.session() as step:
            assert not step.exhaustion_logged
            r.render(template="a", session=step)
            r.render(template="b", session=step)
            assert step.exhaustion_logged
        assert len(r.logs.events("chart-img accounts exhausted")) == execution


class WaveStoreDown(InMemoryUsageStore):
    """A usage store whose one-round-trip wave fails (an outage); one at a time still works."""

    def reserve_many(self, requests: Sequence[ReservationRequest], *, now: datetime, max_wait: float) -> Any:
        raise TransientStoreError("usage store unavailable")


def test_a_first_wave_that_reserves_nothing_in_an_outage_gives_every_permit_back(
    rig: Callable[..., Rig],
) -> None:
    """Issue 28's survivor: the permits taken for a wave the store refused must come back at
    once, not when (or never) the step ends: an instance's pool would drain for good."""
    r = rig([png()], accounts=("acc1", "acc2"), store=WaveStoreDown())
    size = r.api.client.permits.size
    calls = [chart_call(f"tpl_{i}") for i in range(3)]
    with r.api.for_step(calls, r.budget()) as step:
        assert not step.prepaid and free_permits(r) == size  # nothing held for a wave that failed
        assert all(isinstance(step.render(call), ChartSuccess) for call in calls)
    assert free_permits(r) == size and units(r) == 3  # reserved one by one


def test_a_first_wave_with_no_time_left_gives_every_permit_back(rig: Callable[..., Rig]) -> None:
    r = rig([png()], accounts=("acc1",))
    size = r.api.client.permits.size
    with r.api.for_step([chart_call(f"tpl_{i}") for i in range(3)], r.budget(0.5)) as step:
        assert not step.prepaid and free_permits(r) == size  # under min_attempt_seconds: no wave
    assert free_permits(r) == size and units(r) == 0 and r.transport.seen == []


def test_a_first_wave_with_exactly_an_attempts_time_left_is_still_reserved(rig: Callable[..., Rig]) -> None:
    """The budget's last min_attempt_seconds (1 s here) are an attempt's: a wave left with
    exactly that much still reserves, and so does one left with 1.5 s."""
    for seconds in (1.0, 1.5):
        r = rig([png()], accounts=("acc1",))
        with r.api.for_step([chart_call("tpl_a")], r.budget(seconds)) as step:
            assert len(step.prepaid) == 1 and units(r) == 1
            assert step.render(chart_call("tpl_a")) == ChartSuccess(PNG, "acc1")
        assert units(r) == 1 and len(r.transport.seen) == 1


def test_a_call_with_exactly_an_attempts_time_left_is_still_made(rig: Callable[..., Rig]) -> None:
    for seconds in (1.0, 1.5):
        r = rig([png()], accounts=("acc1",))
        assert r.render(budget_seconds=seconds) == ChartSuccess(PNG, "acc1")
        assert units(r) == 1 and len(r.transport.seen) == 1


def held_by_the_log(r: Rig) -> int:
    """The units the log says this instance holds now (what the chaos benchmark reads from
    the log of an instance it killed)."""
    return sum(units_in_hand(r.logs.lines()).values())


def test_the_log_says_every_unit_the_step_holds_at_every_moment(rig: Callable[..., Rig]) -> None:
    """Were the instance killed at any point of a step, its log would tell the units that
    died with it: counted units minus calls made is what the log holds, from the first
    wave's reservation through a render, a dropped lease, an own attempt and the session's
    end (issue 27: units == calls, but for units a killed instance held)."""
    r = rig([png()], accounts=("acc1", "acc2"))
    calls = [chart_call(f"tpl_{i}") for i in range(3)]
    with r.api.for_step(calls, r.budget()) as step:
        assert units(r) - len(r.transport.seen) == held_by_the_log(r) == 3  # the wave, no call yet
        assert step.render(calls[0]) == ChartSuccess(PNG, "acc1")
        assert units(r) - len(r.transport.seen) == held_by_the_log(r) == 2
        r.api.limiter.mark_exhausted("acc2", Answer(429, "Limit Exceeded"))  # call 1's lease is on acc2
        assert step.render(calls[1]) == ChartSuccess(PNG, "acc1")  # dropped, then its own attempt
        assert units(r) - len(r.transport.seen) == held_by_the_log(r) == 1
    assert units(r) - len(r.transport.seen) == held_by_the_log(r) == 0  # call 2's lease dropped
    assert units(r) == len(r.transport.seen) == 2
    [reserved] = r.logs.events("chart-img first wave reserved")
    assert picked(reserved, "runId", "stepId", "units") == {
        "runId": "run-1",
        "stepId": "step-1",
        "units": {"acc1": 2, "acc2": 1},
    }
    dropped = r.logs.events("chart-img prepaid lease dropped")
    assert [picked(line, "accountId", "unitGivenBack") for line in dropped] == [
        {"accountId": "acc2", "unitGivenBack": True},  # call 1's, on the account refused since
        {"accountId": "acc1", "unitGivenBack": True},  # call 2's, unused when the step ended
    ]


class RefundStoreDown(InMemoryUsageStore):
    """A usage store that takes units but cannot give one back (an outage after the wave)."""

    def refund(self, account_id: str, *, day: str) -> Any:
        raise TransientStoreError("usage store unavailable")


def test_a_dropped_lease_whose_unit_could_not_be_given_back_says_so(rig: Callable[..., Rig]) -> None:
    """The unit stays counted (the cautious side), and the log says the lease kept it: the
    chaos benchmark counts it as held, not as given back."""
    r = rig([png()], accounts=("acc1",), store=RefundStoreDown())
    with r.api.for_step([chart_call("tpl_a")], r.budget()) as step:
        assert len(step.prepaid) == 1
    [dropped] = r.logs.events("chart-img prepaid lease dropped")
    assert picked(dropped, "accountId", "unitGivenBack") == {"accountId": "acc1", "unitGivenBack": False}
    assert units(r) == 1 and r.transport.seen == []


def test_an_attempt_says_it_holds_its_unit_before_it_waits_for_the_slot(rig: Callable[..., Rig]) -> None:
    """A prepaid lease whose slot is 0.222 s ahead (BASIC-like pacing, 5/s at 0.9, no
    burst): its "attempt started" line, with the wait ahead, is written before the sleep, so
    a kill during the wait leaves the unit in the log."""
    r = rig([png()], chart_img_rate_per_second=5.0, chart_img_burst=1)
    calls = [chart_call("tpl_a"), chart_call("tpl_b")]
    said_before_sleeping: list[int] = []
    sleep = r.clock.sleep

    def noted_sleep(seconds: float) -> None:
        said_before_sleeping.append(len(r.logs.events("chart api attempt started")))
        sleep(seconds)

    r.clock.sleep = noted_sleep  # type: ignore[method-assign]
    with r.api.for_step(calls, r.budget(5.0)) as step:
        assert len(step.prepaid) == 2 and held_by_the_log(r) == 2
        assert [step.render(call) for call in calls] == [ChartSuccess(PNG, "acc1")] * 2
    first, second = r.logs.events("chart api attempt started")
    assert first["prepaid"] is True and "slotInSeconds" not in first
    # the slot 1 / 4.5 s ahead, to the millisecond; the call's timeout is what the 5 s budget
    # leaves after that wait (10 s CHART_IMG_REQUEST_TIMEOUT_SECONDS would outlast the step)
    assert picked(second, "prepaid", "slotInSeconds", "timeoutSeconds") == {
        "prepaid": True,
        "slotInSeconds": 0.222,
        "timeoutSeconds": 4.778,
    }
    assert said_before_sleeping == [2]  # one sleep, for the second slot, after its line


def test_a_layout_chart_no_session_can_reach_gives_its_prepaid_lease_back_at_once(
    rig: Callable[..., Rig],
) -> None:
    """Prepaid while its session served; the session set aside before the chart's turn: the
    chart is not sent, and its unit and connection go back then, not when the step ends."""
    sessions = [{"id": "mine", "sessionId": "tv-session-0123456789", "sessionIdSign": "tv-sign-0123456789"}]
    r = rig([], accounts=("acc1",), chart_img_sessions_json=SecretStr(json.dumps(sessions)))
    call = replace(chart_call("tpl_l"), layout=LayoutTarget("Private1", private=True, session="mine"))
    with r.api.for_step([call], r.budget()) as step:
        assert len(step.prepaid) == 1 and units(r) == 1
        r.api.sessions.refused("mine", call, Answer(409, "Session Disconnected"))
        failed = step.render(call)
        assert isinstance(failed, ChartFailure) and failed.error.details["errorKind"] == "session_set_aside"
        [dropped] = r.logs.events("chart-img prepaid lease dropped")  # before the step ends
        assert picked(dropped, "accountId", "unitGivenBack") == {"accountId": "acc1", "unitGivenBack": True}
        assert units(r) == 0 and free_permits(r) == r.api.client.permits.size
    assert r.transport.seen == []
