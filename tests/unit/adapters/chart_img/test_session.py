"""A step's chart session (adapters/chart_img/session.py): its first wave's leases and its
"exhaustion logged" flag belong to it alone, and go with it. Over the scripted transport
and a FakeClock (scripted.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime
from typing import Any

from harness.chart_img_server import PNG, chart_call
from unit.adapters.chart_img.scripted import Rig, answer, png
from worker_chart_export.core.chart_img.key_history import Answer
from worker_chart_export.core.chart_img.usage import ReservationRequest
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import ChartSuccess
from worker_chart_export.testing import InMemoryUsageStore


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
