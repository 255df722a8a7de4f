"""A unit pays for a call that left (issue 25, item 2): an attempt that provably never reached
CHART-IMG gives its unit back in the usage document; one that may have reached it keeps it.
Over the scripted transport and a FakeClock (scripted.py): the transport raises what httpx
raises for each failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from harness.chart_img_server import PNG, chart_call
from unit.adapters.chart_img.scripted import Rig, failure, png
from worker_chart_export.core.exceptions import TransientStoreError
from worker_chart_export.core.types import ChartSuccess
from worker_chart_export.testing import InMemoryUsageStore

NEVER_LEFT = [
    httpx.ConnectError("[Errno 111] Connection refused"),
    httpx.ConnectError("[Errno -2] Name or service not known"),  # DNS
    httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number"),  # TLS handshake
    httpx.ConnectTimeout("timed out"),
    httpx.PoolTimeout("no connection free"),
]
MAY_HAVE_LEFT = [
    httpx.ReadTimeout("timed out"),
    httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
    httpx.ReadError("[Errno 104] Connection reset by peer"),
    httpx.WriteError("[Errno 32] Broken pipe"),
]


def doc(r: Rig, account_id: str = "acc1") -> dict[str, Any]:
    return r.store.snapshot().get(account_id, {})


@pytest.mark.parametrize("exc", NEVER_LEFT, ids=lambda e: type(e).__name__ + ":" + str(e)[:20])
def test_an_attempt_that_never_left_gives_its_unit_back(rig: Callable[..., Rig], exc: Exception) -> None:
    r = rig([exc])
    error = failure(r.render())
    assert len(r.transport.seen) == 5  # five attempts (the default), as for any transient failure
    assert (doc(r)["usageToday"], doc(r)["refundedToday"]) == (0, 5)
    assert error["details"]["unitGivenBack"] is True
    assert error["message"].endswith("; the call never left, its unit was given back")
    lines = r.logs.events("chartsApi.request")
    assert [(e["unitGivenBack"], e["refundedToday"]) for e in lines] == [(True, n) for n in range(1, 6)]


@pytest.mark.parametrize("exc", MAY_HAVE_LEFT, ids=lambda e: type(e).__name__)
def test_an_attempt_that_may_have_reached_chart_img_keeps_its_unit(
    rig: Callable[..., Rig], exc: Exception
) -> None:
    r = rig([exc])
    error = failure(r.render())
    assert doc(r)["usageToday"] == 5 and "refundedToday" not in doc(r)
    assert "unitGivenBack" not in error["details"]
    kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
    assert error["message"] == f"CHART-IMG could not be reached ({kind}: {type(exc).__name__})"
    lines = r.logs.events("chartsApi.request")
    assert all("unitGivenBack" not in e for e in lines)
    said = {(e["status"], e["errorCode"], e["errorKind"], e["httpStatus"], e["severity"]) for e in lines}
    assert said == {("failed", "CHART_API_FAILED", kind, None, "WARNING")}


def test_a_refused_connection_then_an_answer_counts_only_the_answer(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.ConnectError("refused"), httpx.ConnectError("refused"), png()])
    assert r.render() == ChartSuccess(PNG, "acc1")
    assert (doc(r)["usageToday"], doc(r)["refundedToday"]) == (1, 2)
    assert doc(r)["tat"] > 0  # the pacing state moved on: a slot taken is not given back


def test_a_refund_the_store_cannot_write_keeps_the_unit_counted(rig: Callable[..., Rig]) -> None:
    class RefundDown(InMemoryUsageStore):
        def refund(self, account_id: str, *, day: str) -> Any:
            raise TransientStoreError("usage store unavailable")

    r = rig([httpx.ConnectError("refused")], store=RefundDown())
    error = failure(r.render())
    assert doc(r)["usageToday"] == 5 and "unitGivenBack" not in error["details"]
    lines = r.logs.events("chart-img unit not given back")
    assert [(e["accountId"], e["errorKind"]) for e in lines] == [("acc1", "TransientStoreError")] * 5
    assert all("unitGivenBack" not in e for e in r.logs.events("chartsApi.request"))


def test_a_first_wave_lease_whose_call_never_left_is_given_back(rig: Callable[..., Rig]) -> None:
    r = rig([httpx.ConnectError("refused"), png()], accounts=("acc1", "acc2"))
    calls = ["tpl_a", "tpl_b"]
    with r.api.for_step([chart_call(c) for c in calls], r.budget()) as step:
        assert sum(d["usageToday"] for d in r.store.snapshot().values()) == 2  # the wave, prepaid
        results = [step.render(chart_call(c)) for c in calls]
    assert all(isinstance(result, ChartSuccess) for result in results)
    snapshot = r.store.snapshot()
    assert sum(d["usageToday"] for d in snapshot.values()) == 2  # two answers, two units
    assert sum(d.get("refundedToday", 0) for d in snapshot.values()) == 1
