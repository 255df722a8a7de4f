"""The reuse lookup's one listing (ArtifactStore.list_objects) on fake-gcs-server, and the
local bucket answering the same names the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import storage

from harness.gcs_emulator import GCS_TEST_PROJECT, FaultyGcsProxy, GcsEmulator, storage_client_for
from worker_chart_export.adapters.gcs import GcsArtifactStore, WritePolicy, make_storage_client
from worker_chart_export.adapters.local import LocalArtifactStore
from worker_chart_export.core.exceptions import ArtifactListError
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

Bucket = tuple[storage.Client, str]
PNG = b"\x89PNG\r\n\x1a\n" + b"chart" * 4
FOLDER = "charts/RUN1/charts_1/"
NAMES = [
    "charts/RUN1/charts_1/20261123T110000000Z_BINANCE-BTCUSDT_1h_a_v1.png",
    "charts/RUN1/charts_1/20261123T114500000Z_BINANCE-BTCUSDT_1h_b_v1.png",
    "charts/RUN1/charts_1/20261123T115959999Z_BINANCE-BTCUSDT_1h_a_v1.png",
    "charts/RUN1/charts_1/manifest.json",
    "charts/RUN1/charts_10/20261123T115000000Z_BINANCE-BTCUSDT_1h_a_v1.png",  # another step
    "charts/RUN2/charts_1/20261123T115000000Z_BINANCE-BTCUSDT_1h_a_v1.png",  # another run
]


def fill(write: Callable[[str, bytes], str]) -> None:
    for name in NAMES:
        write(name, b"{}" if name.endswith(".json") else PNG)


def via(proxy: FaultyGcsProxy, bucket: str, clock: FakeClock) -> GcsArtifactStore:
    policy = WritePolicy(max_attempts=3, initial_wait=0.1, max_wait=0.2, timeout=10.0)
    return GcsArtifactStore(storage_client_for(proxy.url), bucket, policy=policy, clock=clock)


def listings(proxy: FaultyGcsProxy) -> list[str]:
    return [path for method, path in proxy.requests if method == "GET" and path.split("?")[0].endswith("/o")]


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("", NAMES[:4]),
        ("charts/RUN1/charts_1/20261123T114500000Z", NAMES[1:4]),
        ("charts/RUN1/charts_1/20261123T115959999Z", NAMES[2:4]),
        ("charts/RUN1/charts_1/z", []),
    ],
)
def test_one_request_lists_the_steps_folder_from_the_start_offset(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy], start: str, expected: list[str]
) -> None:
    client, bucket = gcs_bucket
    fill(GcsArtifactStore(client, bucket, clock=FakeClock()).create_png)
    proxy = faulty_gcs_proxy(0, 503)

    listed = via(proxy, bucket, FakeClock()).list_objects(FOLDER, start_offset=start)

    assert listed == expected
    (request,) = listings(proxy)  # one round trip, whatever the folder holds
    assert "prefix=charts%2FRUN1%2Fcharts_1%2F" in request


def test_the_local_bucket_lists_as_gcs_does(gcs_bucket: Bucket, tmp_path: Path) -> None:
    client, bucket = gcs_bucket
    gcs = GcsArtifactStore(client, bucket, clock=FakeClock())
    local = LocalArtifactStore(tmp_path, bucket)
    fill(gcs.create_png)
    fill(local.create_png)
    for start in ("", "charts/RUN1/charts_1/20261123T114500000Z", "charts/RUN1/charts_1/m"):
        for prefix in (FOLDER, "charts/RUN1/", "charts/"):
            assert local.list_objects(prefix, start_offset=start) == gcs.list_objects(
                prefix, start_offset=start
            )


def test_a_listing_answered_503_is_retried_then_fails_naming_the_folder(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(0, 503, fail_listings=True)
    clock = FakeClock()

    with pytest.raises(ArtifactListError) as refused:
        via(proxy, bucket, clock).list_objects(FOLDER)

    message = str(refused.value)
    assert len(listings(proxy)) == 3 and len(clock.sleeps) == 2
    assert message.startswith(f"listing gs://{bucket}/{FOLDER} failed after 3 attempts")
    assert "503" in message


def test_a_listing_refused_403_fails_at_once_saying_what_is_missing(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(0, 403, fail_listings=True)

    with pytest.raises(ArtifactListError) as refused:
        via(proxy, bucket, FakeClock()).list_objects(FOLDER)

    assert len(listings(proxy)) == 1
    assert f"no permission to list bucket {bucket!r}" in str(refused.value)


def test_a_missing_bucket_fails_the_listing_naming_the_bucket(gcs_emulator: GcsEmulator) -> None:
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), "no-such-bucket", clock=FakeClock())
    with pytest.raises(ArtifactListError) as refused:
        store.list_objects(FOLDER)
    assert "bucket 'no-such-bucket' not found" in str(refused.value)
