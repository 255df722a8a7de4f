"""The reuse lookup on fake-gcs-server: its one listing (ArtifactStore.list_objects, each
object with its content type and metadata), the ranged read of a PNG's first bytes
(`read_head`), and the local bucket answering the same way; the bucket checks a step and
`serve` make before anything is paid for (`check_bucket`, `probe_write`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import storage

from harness.gcs_emulator import GCS_TEST_PROJECT, FaultyGcsProxy, GcsEmulator, storage_client_for
from worker_chart_export.adapters.gcs import GcsArtifactStore, make_storage_client
from worker_chart_export.adapters.local import LocalArtifactStore
from worker_chart_export.core.exceptions import ArtifactListError, ArtifactReadError, BucketUnusable
from worker_chart_export.core.retry import Backoff
from worker_chart_export.core.types import ListedObject
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


META = {"requestDigest": "d" * 64, "claimToken": "token-1"}


def fill(store: GcsArtifactStore | LocalArtifactStore) -> None:
    for name in NAMES:
        if name.endswith(".json"):
            store.put_manifest(name, b"{}")
        else:
            store.create_png(name, PNG, metadata=META)


def as_listed(name: str) -> ListedObject:
    """What a listing says of one of NAMES."""
    if name.endswith(".json"):
        return ListedObject(name, "application/json", {})
    return ListedObject(name, "image/png", META)


def via(proxy: FaultyGcsProxy, bucket: str, clock: FakeClock) -> GcsArtifactStore:
    policy = Backoff(attempts=3, base=0.1, cap=0.2, jitter=0.1)
    return GcsArtifactStore(
        storage_client_for(proxy.url), bucket, requests=policy, writes=policy, timeout=10.0, clock=clock
    )


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
    fill(GcsArtifactStore(client, bucket, clock=FakeClock()))
    proxy = faulty_gcs_proxy(0, 503)

    listed = via(proxy, bucket, FakeClock()).list_objects(FOLDER, start_offset=start)

    assert listed == [as_listed(name) for name in expected]
    (request,) = listings(proxy)  # one round trip, whatever the folder holds
    assert "prefix=charts%2FRUN1%2Fcharts_1%2F" in request


def test_the_local_bucket_lists_as_gcs_does(gcs_bucket: Bucket, tmp_path: Path) -> None:
    client, bucket = gcs_bucket
    gcs = GcsArtifactStore(client, bucket, clock=FakeClock())
    local = LocalArtifactStore(tmp_path, bucket)
    fill(gcs)
    fill(local)
    for start in ("", "charts/RUN1/charts_1/20261123T114500000Z", "charts/RUN1/charts_1/m"):
        for prefix in (FOLDER, "charts/RUN1/", "charts/"):
            from_gcs = gcs.list_objects(prefix, start_offset=start)
            # the same names, and for a PNG the same content type and metadata (a manifest's
            # content type is not kept beside it locally: the reuse lookup never needs it)
            assert [o.name for o in local.list_objects(prefix, start_offset=start)] == [
                o.name for o in from_gcs
            ]
            assert [o for o in local.list_objects(prefix, start_offset=start) if o.name.endswith(".png")] == [
                o for o in from_gcs if o.name.endswith(".png")
            ]
    for name in NAMES[:3]:
        assert local.read_head(name, 8) == gcs.read_head(name, 8) == PNG[:8]


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
    with pytest.raises(BucketUnusable) as refused:  # not a saving missed: nothing can be stored
        store.list_objects(FOLDER)
    assert "bucket 'no-such-bucket' not found" in str(refused.value)


# --- a PNG's first bytes ---------------------------------------------------------------------


def test_the_first_bytes_of_an_object_are_one_ranged_read(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    client, bucket = gcs_bucket
    GcsArtifactStore(client, bucket, clock=FakeClock()).create_png(NAMES[0], PNG, metadata=META)
    proxy = faulty_gcs_proxy(0, 503)
    store = via(proxy, bucket, FakeClock())

    assert store.read_head(NAMES[0], 8) == PNG[:8]
    assert store.read_head(NAMES[0], 1000) == PNG  # a shorter object: all of it
    reads = [path for method, path in proxy.requests if method == "GET" and "/o/" in path]
    assert len(reads) == 2


def test_reading_an_object_that_is_gone_fails_as_a_read(gcs_bucket: Bucket) -> None:
    client, bucket = gcs_bucket
    with pytest.raises(ArtifactReadError) as refused:
        GcsArtifactStore(client, bucket, clock=FakeClock()).read_head(NAMES[0], 8)
    assert f"reading gs://{bucket}/{NAMES[0]} failed after 1 attempt" in str(refused.value)
    assert "no such object" in str(refused.value)


def test_a_read_answered_503_is_retried_then_fails(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    client, bucket = gcs_bucket
    GcsArtifactStore(client, bucket, clock=FakeClock()).create_png(NAMES[0], PNG, metadata=META)
    proxy = faulty_gcs_proxy(0, 503, fail_object_reads=True)
    clock = FakeClock()
    with pytest.raises(ArtifactReadError, match="failed after 3 attempts"):
        via(proxy, bucket, clock).read_head(NAMES[0], 8)
    assert len(clock.sleeps) == 2


# --- the bucket checks -----------------------------------------------------------------------


def test_a_bucket_that_exists_passes_its_check_with_one_listing_of_one_name(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    client, bucket = gcs_bucket
    fill(GcsArtifactStore(client, bucket, clock=FakeClock()))
    proxy = faulty_gcs_proxy(0, 503)
    via(proxy, bucket, FakeClock()).check_bucket()
    (request,) = proxy.requests
    assert request[0] == "GET" and "maxResults=1" in request[1] and "prefix=charts%2F" in request[1]


def test_a_missing_bucket_fails_its_check_naming_it(gcs_emulator: GcsEmulator) -> None:
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), "no-such-bucket", clock=FakeClock())
    with pytest.raises(BucketUnusable, match="bucket 'no-such-bucket' not found"):
        store.check_bucket()
    with pytest.raises(BucketUnusable, match="bucket 'no-such-bucket' not found"):
        store.probe_write()


def test_the_write_probe_creates_and_deletes_an_object_of_its_own(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(0, 503)
    via(proxy, bucket, FakeClock()).probe_write()
    assert [method for method, _ in proxy.requests] == ["POST", "DELETE"]
    assert "ifGenerationMatch=0" in proxy.requests[0][1]
    assert list(client.list_blobs(bucket)) == []  # nothing left behind


def test_a_bucket_that_refuses_our_writes_fails_the_probe_saying_so(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(10**6, 403)
    with pytest.raises(BucketUnusable, match=f"no permission to write to bucket {bucket!r}"):
        via(proxy, bucket, FakeClock()).probe_write()
    assert proxy.upload_requests == 1  # a refusal is not retried


def test_a_bucket_check_answered_503_is_retried_then_fails(
    gcs_bucket: Bucket, faulty_gcs_proxy: Callable[..., FaultyGcsProxy]
) -> None:
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(0, 503, fail_listings=True)
    clock = FakeClock()
    with pytest.raises(BucketUnusable, match=f"listing gs://{bucket}/ failed after 3 attempts"):
        via(proxy, bucket, clock).check_bucket()
    assert len(listings(proxy)) == 3
