"""The lanes of scripts/test.sh as tests/conftest.py applies them (harness/lanes.py): the
unit lane's tests never need an emulator, and the files that share a served stack or run
several instances stay on one pytest-xdist worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import lanes


def test_a_unit_test_asking_for_an_emulator_is_named_with_what_it_asks_for() -> None:
    collected = [
        ("unit/adapters/test_a.py", "tests/unit/adapters/test_a.py::test_one", ["tmp_path", "gcs_emulator"]),
        (
            "unit/test_b.py",
            "tests/unit/test_b.py::test_two",
            ["firestore_client", "gcs_emulator", "firestore_emulator"],
        ),
        ("unit/test_c.py", "tests/unit/test_c.py::test_three", ["tmp_path", "monkeypatch"]),
        ("integration/test_d.py", "tests/integration/test_d.py::test_four", ["firestore_emulator"]),
    ]
    assert lanes.unit_tests_needing_emulators(collected) == [
        "tests/unit/adapters/test_a.py::test_one needs gcs_emulator",
        "tests/unit/test_b.py::test_two needs firestore_emulator, gcs_emulator",
    ]


def test_no_unit_test_of_this_session_needs_an_emulator(request: pytest.FixtureRequest) -> None:
    """What the collection hook refuses, read back from the tests collected now."""
    collected = [
        (lanes.under_tests(item.path), item.nodeid, getattr(item, "fixturenames", []))
        for item in request.session.items
    ]
    assert any(path.startswith("unit/") for path, _, _ in collected)
    assert lanes.unit_tests_needing_emulators(collected) == []


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("unit/core/test_naming.py", None),
        ("unit/cli/test_errors.py", None),
        ("integration/test_gcs_listing.py", "integration/test_gcs_listing.py"),
        ("e2e/test_flow_advances.py", "e2e/test_flow_advances.py"),
        ("deploy/test_gcloud_judge.py", "deploy/test_gcloud_judge.py"),
        ("deploy/test_deploy_real_cli.py", "deploy-real-cli"),
        ("deploy/test_deploy_real_cli_guards.py", "deploy-real-cli"),
        ("docs/test_docs_commands.py", "docs/test_docs_commands.py"),
        ("e2e/test_chaos_short.py", "several-instances"),
        ("e2e/test_claim_storm.py", "several-instances"),
        ("e2e/test_multi_instance.py", "several-instances"),
        ("deploy/test_deploy_dry_run.py", "deploy-dry-run"),
        ("deploy/test_deploy_dry_run_tells.py", "deploy-dry-run"),
    ],
)
def test_each_file_has_its_worker_group(path: str, group: str | None) -> None:
    assert lanes.worker_group(path) == group


def test_the_files_kept_apart_exist() -> None:
    """A renamed file would fall out of its group silently."""
    assert sorted(path for path in lanes.GROUP_OF if not (lanes.TESTS / path).is_file()) == []


def test_a_path_outside_tests_is_kept_whole() -> None:
    assert lanes.under_tests(lanes.TESTS / "unit" / "test_lanes.py") == "unit/test_lanes.py"
    assert lanes.under_tests(lanes.TESTS.parent / "benchmarks" / "x.py") == (
        (lanes.TESTS.parent / "benchmarks" / "x.py").as_posix()
    )


def pytest_in(folder: Path, plugin: str, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in its own process over `folder`, with one harness plugin (and none the run
    leaves unused)."""
    plugins = ["-p", plugin, "-p", "no:hypothesispytest", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-q", *args],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(lanes.TESTS)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_key_only_a_worker_saw_fails_the_whole_run(tmp_path: Path) -> None:
    """Under pytest-xdist a fixture's leak scan (documents, objects, served output) runs in a
    worker, whose own exit status is not the run's: the controller reports it and fails."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_leaky.py").write_text(
        "from harness.secret_scan import scan_text\n\n\n"
        "def test_a_fixture_scans_a_document_holding_a_key():\n"
        "    scan_text('test-key-' + '0123456789abcdef', 'the document')\n"
    )
    # one worker is enough to be apart from the controller
    run = pytest_in(tmp_path, "harness.secret_scan", "-n", "1", "test_leaky.py")
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout + run.stderr
    assert "API key leak scan: FAILED" in run.stdout and "the document: test-key-0" in run.stdout
    assert "1 passed" in run.stdout  # the test itself passed: the scan alone failed the run


def test_a_files_tests_and_a_groups_files_each_run_on_one_worker(tmp_path: Path) -> None:
    """The scheduler scripts/test.sh runs under, in a real two-worker session: each test
    writes down the worker that ran it. A deploy file's tests on one worker, the
    several-instances group's two files on one worker, unit tests wherever."""
    record = tmp_path / "ran.txt"
    test_body = (
        "import os\nimport pytest\n\n\n@pytest.mark.parametrize('n', range(6))\n"
        "def test_n(n):\n"
        f"    with open({str(record)!r}, 'a') as out:\n"
        "        out.write(f\"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n\")\n"
    )
    files = ["deploy/test_deploy_real_cli.py", "e2e/test_chaos_short.py", "e2e/test_claim_storm.py"]
    for name in [*files, "unit/test_a.py", "unit/test_b.py"]:
        path = tmp_path / "tests" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(test_body)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = pytest_in(tmp_path, "harness.lanes", "-n", "2", "--dist", "loadscope", "tests")
    assert run.returncode == 0, run.stdout + run.stderr
    workers: dict[str, set[str]] = {}
    for line in record.read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert len(workers) == 5
    assert len(workers["test_deploy_real_cli"]) == 1
    assert len(workers["test_chaos_short"]) == 1
    assert workers["test_chaos_short"] == workers["test_claim_storm"]


def test_the_lanes_plugin_lets_a_run_without_xdist_collect(tmp_path: Path) -> None:
    """`pytest -p no:xdist` (one process, e.g. under a debugger): the scheduler hook is
    optional, so pytest does not stop at collection on a hook nobody defines."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    run = pytest_in(tmp_path, "harness.lanes", "-p", "no:xdist", "test_one.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
