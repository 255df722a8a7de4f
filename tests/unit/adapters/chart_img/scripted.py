"""The chart API over an httpx.MockTransport that answers from a script, and a FakeClock.

No sockets and no real waiting: the transport answers from a list, and sleep and both clocks
are one FakeClock, so backoff and budget rules are checked exactly. The `rig` fixture
(conftest.py) builds a Rig; the tests of api.py, http.py, record.py and session.py use it.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from harness.chart_img_server import PNG, FakeClock, chart_call, find_secrets, new_key
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartFailure, ChartResult
from worker_chart_export.settings import Settings
from worker_chart_export.testing import InMemoryUsageStore

Answer = httpx.Response | Exception


def answer(status: int, message: str | None = None, **body: Any) -> httpx.Response:
    if message is not None:
        body["message"] = message
    return httpx.Response(status, json=body)


def png() -> httpx.Response:
    return httpx.Response(200, content=PNG, headers={"content-type": "image/png"})


@dataclass
class Scripted:
    """A MockTransport that answers from a list (the last answer repeats) and logs requests."""

    clock: FakeClock
    answers: list[Answer]
    latency: float = 0.0
    seen: list[httpx.Request] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        self.clock.advance(min(self.latency, request.extensions["timeout"]["read"]))  # gives up
        result = self.answers[min(len(self.seen), len(self.answers)) - 1]
        if isinstance(result, Exception):
            raise result
        return result

    @property
    def accounts(self) -> list[str]:
        return [KEYS_TO_IDS[r.headers["x-api-key"]] for r in self.seen]


KEYS = {"acc1": new_key(), "acc2": new_key(), "acc3": new_key()}
KEYS_TO_IDS = {v: k for k, v in KEYS.items()}


@dataclass
class Rig:
    api: Any
    clock: FakeClock
    transport: Scripted
    store: InMemoryUsageStore
    logs: LogCapture

    def budget(self, seconds: float = 60.0) -> Budget:
        return Budget.starting_now(seconds, clock=self.clock)

    def session(self, budget_seconds: float = 60.0) -> AbstractContextManager[Any]:
        """A step's chart session with no first wave: every render reserves on its own."""
        return self.api.for_step([], self.budget(budget_seconds))

    def render(self, budget_seconds: float = 60.0, *, session: Any = None, **call: Any) -> ChartResult:
        """One call, in `session`, else in a session of its own (a step of one chart)."""
        chart = chart_call(call.pop("template", "tpl_a"), **call)
        if session is None:
            with self.session(budget_seconds) as own:
                result: ChartResult = own.render(chart)
        else:
            result = session.render(chart)
        assert not find_secrets([repr(result), json.dumps(_dict(result), default=str)], KEYS.values())
        return result


def _dict(result: ChartResult) -> dict[str, Any]:
    return result.error.to_dict() if isinstance(result, ChartFailure) else {}


def make_rig(
    answers: list[Answer],
    logs: LogCapture,
    fixtures: Path,
    *,
    accounts: tuple[str, ...] = ("acc1",),
    mode: str = "real",
    latency: float = 0.0,
    store: InMemoryUsageStore | None = None,
    plans: dict[str, str] | None = None,  # account -> its declared plan (else CHART_IMG_PLAN's)
    **settings: Any,
) -> Rig:
    plans = plans or {}
    clock = FakeClock()
    transport = Scripted(clock, answers, latency)
    store = store or InMemoryUsageStore()
    config = [{"id": a, "apiKey": KEYS[a], **({"plan": plans[a]} if a in plans else {})} for a in accounts]
    values: dict[str, Any] = {
        "charts_api_mode": mode,
        "chart_img_base_url": "https://chart-img.test",
        "chart_img_accounts_json": SecretStr(json.dumps(config)),
        "chart_img_request_timeout_seconds": 10.0,
        "chart_img_rate_per_second": 100.0,
        "chart_img_burst": 10,
        "charts_fixtures_dir": fixtures,
        **settings,
    }
    api = build_chart_api(
        Settings(**values),
        store,
        # numbers of its own, so that a test reads its waits from here (the attempts are
        # CHART_IMG_MAX_ATTEMPTS': settings, else the default)
        seams=Seams(
            clock=clock,
            transport=httpx.MockTransport(transport.handler),
            rand=lambda: 0.5,
            retry_policy=RetryPolicy(backoff=Backoff(attempts=None, base=0.5, cap=4.0, jitter=0.5)),
        ),
    )
    return Rig(api, clock, transport, store, logs)


def failure(result: ChartResult) -> dict[str, Any]:
    assert isinstance(result, ChartFailure), result
    return result.error.to_dict()
