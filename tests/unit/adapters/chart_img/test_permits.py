"""Connection permits: a chart takes its connection before its quota unit and send slot.

The HTTP side is an httpx.MockTransport that can hold an answer until the test lets it go,
so "a chart is waiting for a connection" is observed (the permits count their waiters),
never guessed from the clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from harness.chart_img_server import PNG, FakeClock, chart_call, connections_all_free, new_key
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.chart_img.permits import ConnectionPermits
from worker_chart_export.bootstrap import LocalLayout, build_chart_api, chart_img_options, local_step
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ChartSuccess
from worker_chart_export.settings import Settings, load_settings
from worker_chart_export.testing import InMemoryUsageStore

# --- the semaphore -------------------------------------------------------------------------


def test_permits_are_handed_out_up_to_their_number() -> None:
    permits = ConnectionPermits(3)
    assert permits.take_available(5) == 3
    assert not permits.acquire(timeout=0)
    permits.release(2)
    assert permits.take_available(5) == 2
    permits.release(0)  # nothing to give back: no error
    permits.release(3)
    assert permits.acquire(timeout=0)


class RecordingSemaphore(threading.BoundedSemaphore):
    """The permits' semaphore, recording how each acquire was asked to wait."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.asked: list[tuple[bool, float | None]] = []

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.asked.append((blocking, timeout))
        return super().acquire(blocking, timeout)


def test_a_caller_waits_for_a_permit_no_longer_than_it_has_and_no_longer_counts_as_waiting() -> None:
    permits = ConnectionPermits(1)
    permits._free = semaphore = RecordingSemaphore(1)
    assert permits.acquire(timeout=5.0) and semaphore.asked == [(False, None)]  # free: no wait
    assert not permits.acquire(timeout=-2.0)  # no time left: not even a moment's wait
    assert not permits.acquire(timeout=0.01)
    assert semaphore.asked[1:] == [(False, None), (True, 0.0), (False, None), (True, 0.01)]
    assert permits.waiting == 0  # whoever waited is no longer waiting


def test_giving_back_more_than_was_taken_is_a_bug() -> None:
    permits = ConnectionPermits(2)
    permits.take_available(1)
    with pytest.raises(ValueError, match="released too many"):
        permits.release(2)


def test_a_pool_needs_a_connection() -> None:
    with pytest.raises(ValueError) as raised:
        ConnectionPermits(0)
    assert str(raised.value) == "ConnectionPermits needs at least one permit"


# --- sized from the settings ---------------------------------------------------------------


def test_the_pool_holds_every_chart_the_instance_runs_at_once(
    settings_environment: Callable[..., None],
) -> None:
    settings_environment(THREADS="4", CHART_CONCURRENCY="8")
    settings = load_settings()
    assert settings.threads == 4
    assert chart_img_options(settings).max_connections == 32
    assert chart_img_options(settings, steps_at_once=1).max_connections == 8


def test_threads_default_to_functions_frameworks_own(
    settings_environment: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle is functions-framework itself: the gunicorn it builds with THREADS unset."""
    import os

    from flask import Flask
    from functions_framework._http import create_server

    settings_environment()
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # not this machine's count: the rule shows
    server = create_server(Flask("probe"), debug=False)
    gunicorn = server.server_class(server.app, "127.0.0.1", 0, False, **server.options)
    assert gunicorn.cfg.threads == 12
    assert load_settings().threads == 12


def test_a_bad_threads_value_names_the_variable(settings_environment: Callable[..., None]) -> None:
    settings_environment(THREADS="0")
    with pytest.raises(ConfigError, match="THREADS"):
        load_settings()


def test_run_local_runs_one_step_so_its_pool_is_one_steps_charts(tmp_path: Path) -> None:
    key = new_key()
    settings = Settings(
        charts_api_mode="real",
        chart_img_accounts_json=SecretStr(json.dumps([{"id": "acc1", "apiKey": key}])),
        chart_concurrency=5,
        threads=16,
    )
    layout = LocalLayout.under(tmp_path, "run-1")
    api: Any = local_step(settings, tmp_path / "run.json", layout).parts.ports.chart_api
    assert api.client.permits.size == 5


# --- a chart waits for its connection before it reserves ------------------------------------


# How long a wait for something that happens at once may last before the test fails: only a
# hang ever reaches it, so it is generous for a busy machine.
HANG_GUARD = 60.0


class HeldAnswers:
    """Answers a PNG once the test releases the request; counts who is inside."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = threading.Semaphore(0)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.arrived.release()
        assert self.release.wait(HANG_GUARD), "the test never released the answer"
        return httpx.Response(200, content=PNG, headers={"content-type": "image/png"})


def until(condition: Callable[[], bool], what: str) -> None:
    """Polls `condition` (`what` names it in a hang's traceback); pytest-timeout (pyproject)
    ends a wait that never comes, so a busy machine only makes it longer."""
    while not condition():
        time.sleep(0.005)


class Rig:
    def __init__(self, tmp_path: Path, *, connections: int, accounts: int = 1) -> None:
        self.answers = HeldAnswers()
        self.store = InMemoryUsageStore()
        config = [{"id": f"acc{i}", "apiKey": new_key()} for i in range(accounts)]
        settings = Settings(
            charts_api_mode="real",
            chart_img_base_url="https://chart-img.test",
            chart_img_accounts_json=SecretStr(json.dumps(config)),
            chart_img_rate_per_second=100.0,
            chart_img_burst=10,
            chart_concurrency=connections,
            threads=1,
            charts_fixtures_dir=tmp_path,
        )
        self.api: Any = build_chart_api(
            settings,
            self.store,
            seams=Seams(SYSTEM_CLOCK, transport=httpx.MockTransport(self.answers.handler)),
        )
        self.permits: ConnectionPermits = self.api.client.permits
        self.pool = ThreadPoolExecutor(max_workers=8)

    def units(self) -> int:
        return sum(doc["usageToday"] for doc in self.store.snapshot().values())

    def render(self, session: Any, call: ChartCall) -> Future[ChartResult]:
        """`call` on the pool, in `session` (a step's: ChartApi.for_step)."""
        return self.pool.submit(session.render, call)


@pytest.fixture
def rig(tmp_path: Path, log_capture: LogCapture) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(**kwargs: Any) -> Rig:
        made.append(Rig(tmp_path, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.answers.release.set()
        r.pool.shutdown(wait=True)
        r.api.close()


def test_a_chart_waiting_for_a_connection_holds_no_reservation(rig: Callable[..., Rig]) -> None:
    r = rig(connections=1)
    with r.api.for_step([], Budget.starting_now(30.0, SYSTEM_CLOCK)) as step:
        first = r.render(step, chart_call("tpl_a"))
        assert r.answers.arrived.acquire(timeout=HANG_GUARD)  # the first chart is on the wire
        second = r.render(step, chart_call("tpl_b"))
        until(lambda: r.permits.waiting == 1, "the second chart waiting for the connection")
        assert r.units() == 1  # the waiting chart has reserved nothing yet
        r.answers.release.set()
        assert [first.result(HANG_GUARD), second.result(HANG_GUARD)] == [ChartSuccess(PNG, "acc0")] * 2
    assert r.units() == 2 and connections_all_free(r.api)


def test_a_first_wave_reserves_only_what_has_a_connection(rig: Callable[..., Rig]) -> None:
    r = rig(connections=2, accounts=2)
    budget = Budget.starting_now(30.0, SYSTEM_CLOCK)
    with r.api.for_step([], budget) as other:
        other_step = r.render(other, chart_call("tpl_x", run_id="run-other"))
        assert r.answers.arrived.acquire(timeout=HANG_GUARD)  # one connection busy with another step
        calls = [chart_call(f"tpl_{i}") for i in range(3)]
        with r.api.for_step(calls, budget) as step:
            assert r.units() == 1 + 1  # the other step's unit, and one prepaid: one free connection
            renders = [r.render(step, call) for call in calls]
            until(lambda: r.permits.waiting == 2, "the wave's other charts waiting for a connection")
            assert r.units() == 2
            r.answers.release.set()
            results = [f.result(HANG_GUARD) for f in renders]
        assert all(isinstance(result, ChartSuccess) for result in [*results, other_step.result(HANG_GUARD)])
    assert r.units() == 4 and connections_all_free(r.api)


def test_what_a_wave_did_not_use_gives_its_connections_back(rig: Callable[..., Rig]) -> None:
    r = rig(connections=3)
    r.answers.release.set()
    calls = [chart_call(f"tpl_{i}") for i in range(3)]
    with r.api.for_step(calls, Budget.starting_now(30.0, SYSTEM_CLOCK)) as step:
        assert not r.permits.acquire(timeout=0)  # all three held for the wave
        assert step.render(calls[0]) == ChartSuccess(PNG, "acc0")
    assert connections_all_free(r.api) and r.units() == 1  # the two unused units given back
    assert r.store.snapshot()["acc0"]["refundedToday"] == 2


def one_connection_api(
    tmp_path: Path, clock: FakeClock, answers: HeldAnswers, store: InMemoryUsageStore
) -> Any:
    """The real chart API with one account and one connection (CHART_CONCURRENCY=1, THREADS=1)."""
    settings = Settings(
        charts_api_mode="real",
        chart_img_base_url="https://chart-img.test",
        chart_img_accounts_json=SecretStr(json.dumps([{"id": "acc0", "apiKey": new_key()}])),
        chart_img_rate_per_second=100.0,
        chart_concurrency=1,
        threads=1,
        charts_fixtures_dir=tmp_path,
    )
    return build_chart_api(
        settings, store, seams=Seams(clock, transport=httpx.MockTransport(answers.handler))
    )


def test_a_chart_whose_connection_came_after_its_time_ran_out_sends_nothing(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    """The wait for a connection took what the step had left: the chart reserves nothing and
    fails saying the budget ran out, instead of sending a call it has no time to read."""
    clock, answers, store = FakeClock(), HeldAnswers(), InMemoryUsageStore()
    api = one_connection_api(tmp_path, clock, answers, store)
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        with api.for_step([], Budget.starting_now(30.0, clock)) as step:
            first = pool.submit(step.render, chart_call("tpl_a"))
            assert answers.arrived.acquire(timeout=HANG_GUARD)  # the only connection is busy
            second = pool.submit(step.render, chart_call("tpl_b"))
            until(lambda: api.client.permits.waiting == 1, "the second chart waiting for the connection")
            clock.advance(30.0)  # the step's time is spent meanwhile
            answers.release.set()
            assert first.result(HANG_GUARD) == ChartSuccess(PNG, "acc0")
            late = second.result(HANG_GUARD)
        assert isinstance(late, ChartFailure)
        assert (late.error.details["errorKind"], late.error.details["attempts"]) == ("budget", 0)
        assert late.error.message == "the step's time budget ran out before CHART-IMG could be called"
        assert store.snapshot()["acc0"]["usageToday"] == 1 and connections_all_free(api)  # one call only
    finally:
        answers.release.set()
        pool.shutdown(wait=True)
        api.close()


def test_a_chart_whose_connection_never_came_within_its_time_sends_nothing(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    """Its wait for a connection may last what the budget leaves over an attempt's minimum
    (0.5 s here): the only connection stays busy, the chart fails saying the budget ran out."""
    clock, answers, store = FakeClock(), HeldAnswers(), InMemoryUsageStore()
    api = one_connection_api(tmp_path, clock, answers, store)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with api.for_step([], Budget.starting_now(30.0, clock)) as busy:
            first = pool.submit(busy.render, chart_call("tpl_a"))
            assert answers.arrived.acquire(timeout=HANG_GUARD)  # the only connection is busy
            with api.for_step([], Budget.starting_now(1.5, clock)) as step:
                late = step.render(chart_call("tpl_b"))
            answers.release.set()
            assert first.result(HANG_GUARD) == ChartSuccess(PNG, "acc0")
        assert isinstance(late, ChartFailure)
        assert (late.error.details["errorKind"], late.error.details["attempts"]) == ("budget", 0)
        assert store.snapshot()["acc0"]["usageToday"] == 1 and connections_all_free(api)
    finally:
        answers.release.set()
        pool.shutdown(wait=True)
        api.close()
