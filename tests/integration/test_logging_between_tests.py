"""A unit test that ran the CLI leaves structlog printing to that test's captured stream, closed
once it ended. The autouse fixture of tests/conftest.py puts the worker's logging back on the
next test's stdout whatever folder that test is in: a pytest-xdist worker runs an integration
test right after a unit test (a full run beside CPU burners failed four tests of
test_execute_on_emulators.py so, on `ValueError: I/O operation on closed file`, while the
fixture covered tests/unit only)."""

from __future__ import annotations

import subprocess
import sys

from harness.builders import REPO

CLI_UNIT_TESTS = "tests/unit/cli/test_settings_reach.py"  # they run the CLI under capsys
LOGGING_TEST = (  # it logs through the worker's logger and configures nothing itself
    "tests/integration/test_execute_on_emulators.py::test_step_succeeds_with_pngs_and_manifest_in_gcs"
)

ONE_PROCESS = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]


def test_a_test_after_one_that_ran_the_cli_logs_to_its_own_stdout() -> None:
    run = subprocess.run(
        [*ONE_PROCESS, CLI_UNIT_TESTS, LOGGING_TEST],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "passed" in run.stdout and "failed" not in run.stdout
