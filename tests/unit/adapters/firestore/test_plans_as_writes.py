"""The pure parts of the Firestore stores: a core plan (claim, finalize, advance, reap) as the
field paths of one update, the versions a store remembers between a claim and its finalize,
and a claim request's plan. No emulator: these decide WHAT is written, the integration tests
(tests/integration/test_firestore_flow_runs.py, test_leases_and_advance.py) that it lands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from worker_chart_export.adapters.firestore.client import Version
from worker_chart_export.adapters.firestore.leases import reap_update
from worker_chart_export.adapters.firestore.run_documents import (
    REMEMBERED_RUNS,
    WrittenVersions,
    advance_update,
    claim_update,
    finalize_update,
    step_field,
)
from worker_chart_export.adapters.firestore.step_claim import ClaimRequest, _still_ready
from worker_chart_export.core.flow.flow_graph import RunStatus
from worker_chart_export.core.flow.flow_rules import AdvancePlan
from worker_chart_export.core.step.step_rules import ClaimPlan, FinalizePlan, plan_claim
from worker_chart_export.core.types import Claim, ClaimResult, ClaimStatus

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LEASE = NOW + timedelta(seconds=420)
DELETE = firestore.DELETE_FIELD


def _claim() -> Claim:
    return Claim("tok", 2, LEASE)


@pytest.mark.parametrize(
    ("step_id", "fields", "path"),
    [
        ("charts", ("status",), "steps.charts.status"),
        ("chart-1", ("status",), "steps.`chart-1`.status"),  # FieldPath quotes a '-'
        ("a.b", ("outputs", "x"), "steps.`a.b`.outputs.x"),  # a '.' in an id must not nest
        ("charts", (), "steps.charts"),
    ],
)
def test_a_step_field_is_one_quoted_path_whatever_the_step_id(
    step_id: str, fields: tuple[str, ...], path: str
) -> None:
    assert step_field(step_id, *fields) == path


def test_a_claim_sets_its_fields_and_deletes_the_stale_ones_on_that_step_only() -> None:
    plan = ClaimPlan(
        "chart-1",
        {"status": "RUNNING", "attempt": 2, "claimToken": "tok"},
        ("finishedAt", "error"),
        _claim(),
        {},
    )
    assert claim_update(plan) == {
        "steps.`chart-1`.status": "RUNNING",
        "steps.`chart-1`.attempt": 2,
        "steps.`chart-1`.claimToken": "tok",
        "steps.`chart-1`.finishedAt": DELETE,
        "steps.`chart-1`.error": DELETE,
    }


def test_a_claim_with_nothing_stale_deletes_nothing() -> None:
    plan = ClaimPlan("charts", {"status": "RUNNING"}, (), _claim(), {})
    assert claim_update(plan) == {"steps.charts.status": "RUNNING"}


def test_a_finalize_merges_outputs_key_by_key_and_deletes_an_old_error_when_told() -> None:
    plan = FinalizePlan(
        "charts",
        {"status": "SUCCEEDED", "finishedAt": "2026-11-22T10:00:00.000Z"},
        {"outputsManifestGcsUri": "gs://b/m.json", "other": 1},
        delete_error=True,
    )
    assert finalize_update(plan) == {
        "steps.charts.status": "SUCCEEDED",
        "steps.charts.finishedAt": "2026-11-22T10:00:00.000Z",
        "steps.charts.error": DELETE,
        # one path per output: outputs others wrote stay (not "steps.charts.outputs": {...})
        "steps.charts.outputs.outputsManifestGcsUri": "gs://b/m.json",
        "steps.charts.outputs.other": 1,
    }


def test_a_finalize_that_sets_an_error_does_not_delete_it() -> None:
    error = {"code": "X", "message": "m"}
    plan = FinalizePlan("charts", {"status": "FAILED", "error": error}, {}, delete_error=False)
    assert finalize_update(plan) == {"steps.charts.status": "FAILED", "steps.charts.error": error}


def test_an_advance_writes_ready_steps_the_run_status_and_its_error_as_quoted_paths() -> None:
    error = {"code": "DEPENDENCY_FAILED", "message": "m"}
    plan = AdvancePlan("why", ("a-1", "b"), RunStatus.FAILED, error)
    assert advance_update(plan) == {
        "steps.`a-1`.status": "READY",
        "steps.b.status": "READY",
        "status": "FAILED",
        "error": error,
    }


def test_a_reap_sets_and_deletes_fields_of_its_step_only() -> None:
    assert reap_update("chart-1", {"status": "READY"}, ("claimToken", "leaseExpiresAt")) == {
        "steps.`chart-1`.status": "READY",
        "steps.`chart-1`.claimToken": DELETE,
        "steps.`chart-1`.leaseExpiresAt": DELETE,
    }
    assert reap_update("s", {"status": "FAILED"}, ()) == {"steps.s.status": "FAILED"}


# --- the versions a store wrote last ---


def _version(n: int) -> Version:
    return Version({"n": n}, n)


def test_a_remembered_version_is_recalled_until_forgotten() -> None:
    written = WrittenVersions()
    assert written.recall("r1") is None
    written.remember("r1", _version(1))
    written.remember("r1", _version(2))  # the newer write replaces the older
    assert written.recall("r1") == _version(2)
    written.forget("r1")
    assert written.recall("r1") is None
    written.forget("never")  # forgetting what was never remembered is fine


def test_the_versions_kept_are_bounded_and_the_least_recently_written_go_first() -> None:
    written = WrittenVersions(capacity=2)
    written.remember("a", _version(1))
    written.remember("b", _version(2))
    written.remember("a", _version(3))  # a written again: b is now the oldest
    written.remember("c", _version(4))
    assert (written.recall("a"), written.recall("b"), written.recall("c")) == (_version(3), None, _version(4))


def test_by_default_a_store_remembers_1024_runs() -> None:
    written = WrittenVersions()
    for n in range(REMEMBERED_RUNS + 1):
        written.remember(f"r{n}", _version(n))
    assert REMEMBERED_RUNS == 1024
    assert written.recall("r0") is None and written.recall("r1") == _version(1)


# --- a claim request ---


def _document(status: str = "READY", **step: object) -> dict[str, object]:
    return {"runId": "run1", "steps": {"chart-1": {"stepType": "CHART_EXPORT", "status": status, **step}}}


def test_a_claim_request_plans_with_its_own_token_time_and_lease() -> None:
    request = ClaimRequest("run1", "chart-1", "tok-7", NOW, LEASE)
    doc = _document(attempt=1)
    assert request.plan(doc) == plan_claim(
        doc, "run1", "chart-1", token="tok-7", now=NOW, lease_expires_at=LEASE
    )
    plan = request.plan(doc)
    assert isinstance(plan, ClaimPlan)
    assert plan.claim == Claim("tok-7", 2, LEASE)
    assert request.plan(None) == ClaimResult(ClaimStatus.NOT_FOUND, "flow_run run1 does not exist")


def test_a_claim_request_settles_on_a_version_read_after_its_commit() -> None:
    request = ClaimRequest("run1", "chart-1", "tok-7", NOW, LEASE)
    ours = request.settled(_document("RUNNING", claimToken="tok-7", attempt=3))
    assert ours is not None and ours.status is ClaimStatus.CLAIMED
    assert ours.claim == Claim("tok-7", 3, LEASE)
    theirs = request.settled(_document("RUNNING", claimToken="other", attempt=3))
    assert theirs is not None and theirs.status is ClaimStatus.CONFLICT
    assert request.settled(_document("READY")) is None  # still READY: try again
    gone = ClaimResult(ClaimStatus.NOT_FOUND, "flow_run run1 does not exist (lost the claim race)")
    assert request.settled(None) == gone


def test_a_claim_request_names_its_step_and_run_in_errors() -> None:
    assert (
        ClaimRequest("run1", "chart-1", "t", NOW, LEASE).operation
        == "claim of step chart-1 in flow_runs/run1"
    )


def test_claim_tries_that_all_lost_end_with_no_outcome() -> None:
    assert _still_ready(None) is None  # type: ignore[arg-type]
