"""The installed Google Cloud CLI, loaded once for the deploy tests (gcloud_cli.GcloudJudge), and
the deploys the real-CLI files start from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deploy_sandbox import Deploy, Sandbox
from gcloud_cli import GcloudJudge, real_gcloud


@pytest.fixture(scope="session")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcloudJudge]:
    gcloud = real_gcloud()
    if gcloud is None:
        # scripts/test.sh refuses to start without it; a skip here would check nothing
        pytest.fail("no Google Cloud CLI (gcloud not on PATH): nothing to check the deploy calls against")
    started = GcloudJudge(gcloud, tmp_path_factory.mktemp("gcloud-judge")).start()
    yield started
    started.stop()


# Session fixtures: the files that use them are one group of harness/lanes.py, on one worker,
# which runs each deploy once. A test never changes them: it copies the sandbox (Sandbox.copy).
@pytest.fixture(scope="session")
def first(judge: GcloudJudge, tmp_path_factory: pytest.TempPathFactory) -> tuple[Sandbox, Deploy]:
    """deploy.sh's first run into a new project, with the sandbox's settings."""
    sandbox = Sandbox(tmp_path_factory.mktemp("first"), judge.socket_path)
    return sandbox, sandbox.deploy()


@pytest.fixture(scope="session")
def redeploy(first: tuple[Sandbox, Deploy], tmp_path_factory: pytest.TempPathFactory) -> Deploy:
    """deploy.sh run again, with the same settings, over a copy of the first deploy's project."""
    return first[0].copy(tmp_path_factory.mktemp("redeploy")).deploy()
