"""What the test lanes of scripts/test.sh need from the collected tests (docs/testing.md): a
pytest hook (tests/conftest.py takes it in) and the checks tests/conftest.py applies at
collection."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).resolve().parents[1]
# The emulators need Java and the Google Cloud CLI's jar: the unit lane (`scripts/test.sh
# --unit`) runs without either, so no unit test may ask for them.
EMULATOR_FIXTURES = frozenset({"firestore_emulator", "gcs_emulator"})
# Tests beside their services share module fixtures (a served stack, a deploy sandbox, the
# browser): under pytest-xdist a file's tests stay on one worker (LaneScheduling), which builds
# each such fixture once, as one process does.
SERVICE_FOLDERS = frozenset({"integration", "e2e", "deploy", "docs"})
# Files that must not run beside each other, or that share a session fixture worth building
# once: one worker runs a group's files one after the other, in their order.
SHARED_GROUPS = {
    # the heaviest: each starts several served instances of the worker and a stand-in
    "several-instances": ("e2e/test_chaos_short.py", "e2e/test_claim_storm.py", "e2e/test_multi_instance.py"),
    # deploy.sh --dry-run empties and refills out/deploy-dry-run/ in the checkout, which their
    # tests read back: two at once read each other's (or an emptied) folder
    "deploy-dry-run": ("deploy/test_deploy_dry_run.py", "deploy/test_deploy_dry_run_tells.py"),
    # deploy.sh under the real gcloud: they copy one first deploy and one redeploy
    # (tests/deploy/conftest.py), which one worker builds once
    "deploy-real-cli": (
        "deploy/test_deploy_real_cli.py",
        "deploy/test_deploy_real_cli_guards.py",
        "deploy/test_deploy_sessions.py",
    ),
}
GROUP_OF = {path: group for group, paths in SHARED_GROUPS.items() for path in paths}


def under_tests(path: Path) -> str:
    """`path` relative to tests/, as `unit/core/test_naming.py`; a path elsewhere whole."""
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.as_posix()


def unit_tests_needing_emulators(tests: Iterable[tuple[str, str, Iterable[str]]]) -> list[str]:
    """Of (path under tests/, test id, fixture names) for each collected test: each unit
    test that asks, directly or through another fixture, for an emulator, with those asked."""
    found = []
    for path, test_id, fixtures in tests:
        needed = sorted(EMULATOR_FIXTURES.intersection(fixtures))
        if path.startswith("unit/") and needed:
            found.append(f"{test_id} needs {', '.join(needed)}")
    return found


def worker_group(path: str) -> str | None:
    """The worker group of a test file (path under tests/); none for a unit test, which any
    worker may take."""
    if path in GROUP_OF:
        return GROUP_OF[path]
    return path if path.split("/", 1)[0] in SERVICE_FOLDERS else None


def scope_of(nodeid: str) -> str:
    """The unit of work a test travels in to one worker: its file's group, else the test alone.
    `nodeid` as pytest writes it, from the rootdir (`tests/e2e/test_x.py::test_y[a]`)."""
    path = nodeid.split("::", 1)[0].removeprefix(f"{TESTS.name}/")
    return worker_group(path) or nodeid


class LaneScheduling(LoadScopeScheduling):
    """pytest-xdist's --dist loadscope with the scopes above. Not xdist's own loadgroup: it
    carries a test's xdist_group mark to the controller by rewriting the node id, which
    pytest 9.2 no longer takes, and then spreads a group's tests over every worker without a
    word (pytest-dev/pytest-xdist#1386)."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


# optionalhook: `pytest -p no:xdist` (one process, no scheduler) must still collect
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LaneScheduling | None:
    """--dist loadscope (scripts/test.sh) spreads the tests over the workers by their files'
    groups instead of by module; any other --dist is pytest-xdist's own."""
    return LaneScheduling(config, log) if config.getvalue("dist") == "loadscope" else None
