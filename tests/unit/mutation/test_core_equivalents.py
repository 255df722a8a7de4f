"""The checks of core's listed equivalents outside the redaction (scripts/mutation_equivalents.txt,
block `# core`): each applies the entry's mutant and compares it with the code. Registered in
test_equivalents.py's list of checks by importing this module there.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import product
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.builders import chart_step, flow_run
from unit.mutation.mutants import Equivalent, assert_same, checks, late
from worker_chart_export.core.step import step_rules
from worker_chart_export.core.templates import chart_request

NOW = datetime(2026, 11, 23, 18, 30, tzinfo=UTC)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),  # NaN and infinities too
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@checks
@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(st.text(max_size=5), JSON, max_size=4))
@example(body={"symbol": "BINANCE:BTCUSDT", "interval": "1h", "note": "ü €"})
@example(body={"width": float("nan")})
def test_the_digest_of_a_body_is_the_same_for_any_body(entry: Equivalent, body: dict[str, Any]) -> None:
    assert_same(entry, late(chart_request, "body_digest", body))


@checks
def test_a_settled_claim_is_the_same_for_any_document_and_moment(entry: Equivalent) -> None:
    """Every status of the step, our token or another's or none, any attempt, the step or the
    run gone; read at, before and after the lease's end."""
    documents: list[dict[str, Any] | None] = [None, flow_run({}), flow_run({"other": chart_step()})]
    for status, token, attempt in product(
        ["READY", "RUNNING", "SUCCEEDED", "FAILED", "PENDING"], ["mine", "theirs", None], [None, 0, 1, 3, "2"]
    ):
        step = chart_step(status=status, attempt=attempt)
        if token is not None:
            step["claimToken"] = token
        documents.append(flow_run({"charts": step}))
    lease_end = NOW + timedelta(minutes=10)
    for document, now in product(documents, [NOW, lease_end, lease_end + timedelta(seconds=1)]):
        call = late(
            step_rules,
            "settled_claim",
            document,
            "run1",
            "charts",
            token="mine",
            now=now,
            lease_expires_at=lease_end,
        )
        assert_same(entry, call)
