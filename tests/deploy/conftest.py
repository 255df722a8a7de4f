"""The installed Google Cloud CLI, loaded once for the deploy tests (gcloud_cli.GcloudJudge)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
