"""What the docs list beside the code, kept complete (docs/architecture.md, "Where to change
what"): a retry policy added to core/retry.py without its row in design.md's table, or an
error code added to core/error_codes.py without its row in the runbook, fails here."""

from __future__ import annotations

from harness.builders import REPO
from worker_chart_export.core import retry
from worker_chart_export.core.error_codes import ErrorCode

# outcomes that are no failure: never recorded on a step (error model, "No-op")
NOT_RECORDED = {
    ErrorCode.NO_READY_STEP,
    ErrorCode.STEP_CLAIM_CONFLICT,
    ErrorCode.STEP_FINALIZE_CONFLICT,
    ErrorCode.FLOW_RUN_NOT_FOUND,
}


def table_rows(path: str) -> list[str]:
    return [line for line in (REPO / path).read_text(encoding="utf-8").splitlines() if line.startswith("| `")]


def test_every_retry_policy_has_a_row_in_the_design_table() -> None:
    policies = [name for name, value in vars(retry).items() if isinstance(value, retry.Backoff)]
    assert len(policies) >= 9  # the policies there now: the test is not vacuous
    rows = table_rows("docs/design.md")
    missing = [name for name in policies if not any(row.startswith(f"| `{name}` |") for row in rows)]
    assert missing == [], f"add a row for each to docs/design.md, 'Retry policies': {missing}"


def test_every_error_code_a_step_records_has_a_runbook_row() -> None:
    rows = table_rows("deploy/RUNBOOK.md")
    recorded = [code.value for code in ErrorCode if code not in NOT_RECORDED]
    missing = [code for code in recorded if not any(row.startswith(f"| `{code}` |") for row in rows)]
    assert missing == [], f"add a row for each to deploy/RUNBOOK.md's table of codes: {missing}"
