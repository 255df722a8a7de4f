"""Layout charts against the CHART-IMG stand-in (its Shared Layout endpoint), with the real HTTP
client, limiter and usage file (issue 40 items 3-4): which session a layout chart is sent with
and from which account, that a private layout no session reaches is never asked for, that
Layout Forbidden and an unknown layout are the request's (no key blamed), and that a session
CHART-IMG no longer accepts is set aside (one ERROR naming the layout, not the key) until a
later chart probes it.

The worker's clock is a FakeClock: the 15 minutes before a probe pass without waiting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import PNG, ChartImgServer, FakeClock, chart_call, find_secrets
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.usage_local import FileUsageStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.request_retries import RetryPolicy
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult, ChartSuccess, LayoutTarget
from worker_chart_export.settings import Settings

REFUSED = "tradingview session refused: set aside, then probed"
# a usage document's fields that set a key aside (core/chart_img/set_aside.py)
SET_ASIDE_FIELDS = ("disabled", "disabledUntil", "disabledReason", "coolUntil")
SERVES_AGAIN = "tradingview session serves again: its probe rendered"


@dataclass
class Stand:
    server: ChartImgServer
    clock: FakeClock
    store: FileUsageStore
    logs: LogCapture
    secrets: list[str] = field(default_factory=list)
    results: list[ChartResult] = field(default_factory=list)

    def instance(self, accounts: list[dict[str, Any]], sessions: dict[str, tuple[str, str]]) -> Any:
        for account in accounts:
            account["apiKey"] = self.server.add_account(account["id"])
            self.secrets.append(account["apiKey"])
        listed = [{"id": n, "sessionId": v[0], "sessionIdSign": v[1]} for n, v in sessions.items()]
        self.secrets += [value for pair in sessions.values() for value in pair]
        settings = Settings(
            charts_api_mode="real",
            chart_img_base_url=self.server.base_url,
            chart_img_accounts_json=SecretStr(json.dumps(accounts)),
            chart_img_sessions_json=SecretStr(json.dumps(listed)),
            chart_img_request_timeout_seconds=5.0,
            chart_img_layout_timeout_seconds=10.0,
            chart_img_rate_per_second=50.0,
            chart_img_burst=20,
            charts_fixtures_dir=Path("/nonexistent"),
        )
        policy = RetryPolicy(backoff=Backoff(attempts=None, base=0.5, cap=4.0))
        return build_chart_api(settings, self.store, seams=Seams(clock=self.clock, retry_policy=policy))

    def step(self, api: Any, *calls: ChartCall) -> list[ChartResult]:
        with api.for_step(calls, Budget.starting_now(60.0, self.clock)) as step:
            results: list[ChartResult] = [step.render(call) for call in calls]
        self.results += results
        return results


def layout_call(template_id: str, layout: LayoutTarget) -> ChartCall:
    return replace(chart_call(template_id, {"width": 800, "height": 600}), layout=layout)


@pytest.fixture
def stand(chart_img_server: ChartImgServer, log_capture: LogCapture, tmp_path: Path) -> Iterator[Stand]:
    made = Stand(chart_img_server, FakeClock(), FileUsageStore(tmp_path / "usage.json"), log_capture)
    yield made
    texts = [log_capture.text, *map(repr, made.results), json.dumps(made.store.read_all())]
    texts += [json.dumps(r.error.to_dict()) for r in made.results if isinstance(r, ChartFailure)]
    texts += [json.dumps(chart_img_server.request_log())]
    assert made.secrets and find_secrets(texts, made.secrets) == []


def no_key_set_aside(stand: Stand) -> bool:
    """No usage document says a key is disabled or set aside."""
    documents = stand.store.read_all().values()
    assert documents  # the usage file holds the accounts' books
    return not any(d.get(field) for d in documents for field in SET_ASIDE_FIELDS)


def test_each_layout_goes_with_its_session_from_an_account_that_may_send_it(stand: Stand) -> None:
    mine, shared = stand.server.add_session("mine"), stand.server.add_session("team")
    stand.server.add_layout("Shared01")
    stand.server.add_layout("Private1", private=True, sessions=["mine"])
    stand.server.add_layout("Private2", private=True, sessions=["team"])
    api = stand.instance([{"id": "bare"}, {"id": "own", "session": "mine"}], {"mine": mine, "team": shared})
    results = stand.step(
        api,
        chart_call("advanced_v1"),
        layout_call("shared_v1", LayoutTarget("Shared01")),
        layout_call("private_v1", LayoutTarget("Private1", private=True)),  # the account's own session
        layout_call("named_v1", LayoutTarget("Private2", private=True, session="team")),  # the template's
    )
    assert all(isinstance(r, ChartSuccess) and r.png == PNG for r in results), results
    seen = {
        (r["endpoint"], r["layout_id"]): (r["session"], len(r["session_headers"]))
        for r in stand.server.request_log()
    }
    assert seen[("advanced-chart", None)] == (None, 0)
    assert seen[("layout-chart", "Private1")] == ("mine", 2)
    assert seen[("layout-chart", "Private2")] == ("team", 2)
    # a shared layout goes bare from 'bare', with the account's own session from 'own'
    assert seen[("layout-chart", "Shared01")] in ((None, 0), ("mine", 2))
    private = next(r for r in stand.server.requests if r.layout_id == "Private1")
    assert private.account_id == "own"  # only the account with that session may send it


def test_private_without_session_forbidden_and_unknown_layouts_end_their_charts_no_key_blamed(
    stand: Stand,
) -> None:
    stand.server.add_layout("Locked01", forbidden=True)
    api = stand.instance([{"id": "acc1"}, {"id": "acc2"}], {})
    private, forbidden, unknown, advanced = stand.step(
        api,
        layout_call("private_v1", LayoutTarget("Private1", private=True)),
        layout_call("forbidden_v1", LayoutTarget("Locked01")),
        layout_call("unknown_v1", LayoutTarget("Missing1")),
        chart_call("advanced_v1"),
    )
    assert isinstance(private, ChartFailure) and private.error.code is ErrorCode.VALIDATION_FAILED
    assert private.error.details["errorKind"] == "layout_session_missing"
    assert isinstance(forbidden, ChartFailure) and forbidden.error.details["errorKind"] == "layout_forbidden"
    assert isinstance(unknown, ChartFailure) and unknown.error.details["errorKind"] == "layout_not_found"
    assert not forbidden.error.retryable and not unknown.error.retryable
    assert isinstance(advanced, ChartSuccess)
    # the private layout was never asked for; the others once each: final, not tried on another key
    assert [(r.layout_id, r.status) for r in stand.server.requests] == [
        ("Locked01", 403),
        ("Missing1", 404),
        (None, 200),
    ]
    assert no_key_set_aside(stand)
    assert set(api.limiter.usable_accounts()) == {"acc1", "acc2"}


def test_a_session_no_longer_accepted_is_set_aside_once_then_a_later_chart_probes_it(stand: Stand) -> None:
    mine = stand.server.add_session("mine")
    stand.server.add_layout("Private1", private=True, sessions=["mine"])
    api = stand.instance([{"id": "acc1"}, {"id": "acc2"}], {"mine": mine})
    private = LayoutTarget("Private1", private=True, session="mine")
    stand.server.expire_session("mine")  # a logout: CHART-IMG answers 409 to its headers

    first, advanced = stand.step(api, layout_call("private_v1", private), chart_call("advanced_v1"))
    assert isinstance(first, ChartFailure) and first.error.retryable  # the step waits for a probe
    assert first.error.details["errorKind"] == "session_refused"
    assert isinstance(advanced, ChartSuccess)
    (refused,) = stand.logs.events(REFUSED)  # one ERROR, naming the layout and the session's id
    assert (refused["severity"], refused["layoutId"], refused["session"]) == ("ERROR", "Private1", "mine")
    assert "accountId" not in refused
    assert [r.status for r in stand.server.requests if r.layout_id] == [409]  # no other key tried it
    assert no_key_set_aside(stand)

    # set aside: the next chart is not sent at all
    (held,) = stand.step(api, layout_call("private_v1", private))
    assert isinstance(held, ChartFailure) and held.error.details["errorKind"] == "session_set_aside"
    assert len([r for r in stand.server.requests if r.layout_id]) == 1

    # the user logs in again (the same values live again) and the set-aside passes: a probe decides
    stand.server.add_session("mine", mine)
    stand.clock.advance(16 * 60.0)  # the set-aside is 15 minutes
    (probed,) = stand.step(api, layout_call("private_v1", private))
    assert isinstance(probed, ChartSuccess)
    assert len(stand.logs.events(SERVES_AGAIN)) == 1
    assert len(stand.logs.events(REFUSED)) == 1


def test_a_session_only_an_account_of_another_plan_holds_does_not_reach_the_layout(stand: Stand) -> None:
    """A private layout the template's plan gives to PRO; only the BASIC account has a
    session: no account that may serve it can reach it, refused before any call (not
    "every account at its daily limit", which none is)."""
    mine = stand.server.add_session("mine")
    stand.server.add_layout("Private1", private=True, sessions=["mine"])
    api = stand.instance(
        [{"id": "basic", "plan": "BASIC", "session": "mine"}, {"id": "pro", "plan": "PRO"}], {"mine": mine}
    )
    call = replace(
        layout_call("big_v1", LayoutTarget("Private1", private=True)), serving_plans=frozenset({"PRO"})
    )
    (result,) = stand.step(api, call)
    assert isinstance(result, ChartFailure) and result.error.code is ErrorCode.VALIDATION_FAILED, result
    assert result.error.details["errorKind"] == "layout_session_missing"
    assert stand.server.request_log() == []
