"""GcsArtifactStore against fake-gcs-server (and a fault-injecting proxy in front of it)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.oauth2.credentials import Credentials

from harness.gcs_emulator import (
    GCS_TEST_PROJECT,
    FaultyGcsProxy,
    GcsEmulator,
    list_objects,
    object_metadata,
    read_object,
    storage_client_for,
)
from worker_chart_export.adapters.gcs import (
    DISABLE_BUCKET_METADATA_ENV,
    GcsArtifactStore,
    make_storage_client,
)
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import ArtifactWriteError, BucketUnusable
from worker_chart_export.core.retry import Backoff
from worker_chart_export.testing import FakeClock

pytestmark = pytest.mark.emulators

PNG_A = b"\x89PNG\r\n\x1a\n" + b"first" * 10
PNG_B = b"\x89PNG\r\n\x1a\n" + b"second" * 10
PNG_PATH = "charts/RUN1/charts_1/20260101T000000000Z_BINANCE-BTCUSDT_1h_price_v1.png"
MANIFEST_PATH = "charts/RUN1/charts_1/manifest.json"
META = {"requestDigest": "d" * 64, "claimToken": "token-1"}

Bucket = tuple[storage.Client, str]
ProxyFactory = Callable[..., FaultyGcsProxy]


class SleepRecorder(FakeClock):
    @property
    def calls(self) -> list[float]:
        return self.sleeps


def store_via(
    proxy: FaultyGcsProxy,
    bucket: str,
    sleep: SleepRecorder,
    *,
    max_attempts: int = 4,
    initial_wait: float = 0.2,
    max_wait: float = 2.0,
) -> GcsArtifactStore:
    policy = Backoff(attempts=max_attempts, base=initial_wait, cap=max_wait, jitter=initial_wait)
    return GcsArtifactStore(
        storage_client_for(proxy.url), bucket, requests=policy, writes=policy, timeout=10.0, clock=sleep
    )


def test_make_storage_client_targets_the_emulator_anonymously(gcs_emulator: GcsEmulator) -> None:
    client = make_storage_client(GCS_TEST_PROJECT)
    assert client.api_endpoint == gcs_emulator.url
    assert isinstance(client._credentials, AnonymousCredentials)
    assert client.project == GCS_TEST_PROJECT


def test_the_worker_s_client_looks_up_no_bucket_metadata_behind_its_back(
    gcs_bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """google-cloud-storage would fetch the bucket's metadata (buckets.get) in a background
    thread at its first use, for span labels nobody exports."""
    from google.cloud.storage._bucket_metadata_cache import BucketMetadataCache

    monkeypatch.delenv(DISABLE_BUCKET_METADATA_ENV, raising=False)
    lookups: list[str] = []
    monkeypatch.setattr(BucketMetadataCache, "get_or_queue_fetch", lambda _, name: lookups.append(name))
    _, bucket = gcs_bucket
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), bucket, clock=SYSTEM_CLOCK)
    store.create_png(PNG_PATH, PNG_A, metadata=META)
    assert lookups == []


def test_create_png_writes_bytes_with_png_content_type(gcs_bucket: Bucket) -> None:
    client, bucket = gcs_bucket
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), bucket, clock=SYSTEM_CLOCK)

    uri = store.create_png(PNG_PATH, PNG_A, metadata=META)

    assert uri == f"gs://{bucket}/{PNG_PATH}"
    assert store.bucket == bucket
    assert read_object(client, bucket, PNG_PATH) == (PNG_A, "image/png")
    assert list_objects(client, bucket) == [PNG_PATH]
    assert object_metadata(client, bucket, PNG_PATH)["metadata"] == META  # as GCS custom metadata


def test_create_png_twice_is_success_and_keeps_the_first_content(gcs_bucket: Bucket) -> None:
    client, bucket = gcs_bucket
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), bucket, clock=SYSTEM_CLOCK)
    first = store.create_png(PNG_PATH, PNG_A, metadata=META)
    generation = object_metadata(client, bucket, PNG_PATH)["generation"]

    second = store.create_png(PNG_PATH, PNG_B, metadata={"requestDigest": "e" * 64, "claimToken": "t2"})

    assert second == first
    assert read_object(client, bucket, PNG_PATH) == (PNG_A, "image/png")
    assert object_metadata(client, bucket, PNG_PATH)["generation"] == generation
    assert object_metadata(client, bucket, PNG_PATH)["metadata"] == META  # the first write's


def test_put_manifest_overwrites_with_json_and_no_cache(gcs_bucket: Bucket) -> None:
    client, bucket = gcs_bucket
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), bucket, clock=SYSTEM_CLOCK)
    old = json.dumps({"items": ["old"]}).encode()
    new = json.dumps({"items": ["new"]}).encode()

    assert store.put_manifest(MANIFEST_PATH, old) == f"gs://{bucket}/{MANIFEST_PATH}"
    assert store.put_manifest(MANIFEST_PATH, new) == f"gs://{bucket}/{MANIFEST_PATH}"

    assert read_object(client, bucket, MANIFEST_PATH) == (new, "application/json")
    assert object_metadata(client, bucket, MANIFEST_PATH).get("cacheControl") == "no-cache"


def object_requests(proxy: FaultyGcsProxy) -> list[str]:
    """The methods of the requests about objects (not the proxy's own bucket check)."""
    return [method for method, path in proxy.requests if "/o" in path.split("?")[0]]


class Fence:
    """A `still_ours` that counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return True


def test_fenced_first_manifest_is_one_request(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(0, 503)
    fence = Fence()

    store_via(proxy, bucket, SleepRecorder()).put_manifest(MANIFEST_PATH, b'{"n": 1}', still_ours=fence)

    assert object_requests(proxy) == ["POST"]  # no look at the object first
    assert fence.asked == 1
    assert read_object(client, bucket, MANIFEST_PATH) == (b'{"n": 1}', "application/json")


def test_fenced_manifest_over_an_earlier_one_looks_asks_again_and_replaces_it(
    gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory
) -> None:
    client, bucket = gcs_bucket
    GcsArtifactStore(client, bucket, clock=SYSTEM_CLOCK).put_manifest(MANIFEST_PATH, b'{"attempt": 1}')
    proxy = faulty_gcs_proxy(0, 503)
    fence = Fence()

    store_via(proxy, bucket, SleepRecorder()).put_manifest(MANIFEST_PATH, b'{"attempt": 2}', still_ours=fence)

    # the write as if none existed fails (412); the generation is read, the fence asked again
    assert object_requests(proxy) == ["POST", "GET", "POST"]
    assert fence.asked == 2
    assert read_object(client, bucket, MANIFEST_PATH) == (b'{"attempt": 2}', "application/json")


def test_a_failed_look_at_the_earlier_manifest_is_reported_as_a_read(
    gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory
) -> None:
    client, bucket = gcs_bucket
    GcsArtifactStore(client, bucket, clock=SYSTEM_CLOCK).put_manifest(MANIFEST_PATH, b'{"attempt": 1}')
    proxy = faulty_gcs_proxy(0, 403, fail_object_reads=True)

    with pytest.raises(ArtifactWriteError) as raised:
        store_via(proxy, bucket, SleepRecorder()).put_manifest(
            MANIFEST_PATH, b'{"attempt": 2}', still_ours=Fence()
        )

    message = str(raised.value)
    assert message.startswith(
        f"reading the generation of gs://{bucket}/{MANIFEST_PATH} failed after 1 attempt"
    )
    assert f"no permission to read bucket '{bucket}'" in message
    assert read_object(client, bucket, MANIFEST_PATH) == (b'{"attempt": 1}', "application/json")


def test_transient_503_is_retried_then_succeeds(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(2, 503)
    sleep = SleepRecorder()
    store = store_via(proxy, bucket, sleep, initial_wait=0.2, max_wait=2.0)

    uri = store.create_png(PNG_PATH, PNG_A, metadata=META)

    assert uri == f"gs://{bucket}/{PNG_PATH}"
    assert proxy.upload_requests == 3
    assert len(sleep.calls) == 2
    # exponential: first wait in [0.2, 0.4], second in [0.4, 0.6] (initial * 2^n + jitter)
    assert 0.2 <= sleep.calls[0] <= 0.4 < sleep.calls[1] <= 0.6
    assert read_object(client, bucket, PNG_PATH) == (PNG_A, "image/png")


def test_lost_answer_retry_hits_412_and_counts_as_success(
    gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory
) -> None:
    """The first upload lands but the caller sees a 503; the retry's 412 means "already there"."""
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(1, 503, forward_first=True)
    sleep = SleepRecorder()

    uri = store_via(proxy, bucket, sleep).create_png(PNG_PATH, PNG_A, metadata=META)

    assert uri == f"gs://{bucket}/{PNG_PATH}"
    assert proxy.upload_requests == 2
    assert len(sleep.calls) == 1
    assert read_object(client, bucket, PNG_PATH) == (PNG_A, "image/png")


def test_manifest_retry_on_503_then_succeeds(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(1, 503)
    sleep = SleepRecorder()

    store_via(proxy, bucket, sleep).put_manifest(MANIFEST_PATH, b'{"ok": true}')

    assert proxy.upload_requests == 2
    assert len(sleep.calls) == 1
    assert read_object(client, bucket, MANIFEST_PATH) == (b'{"ok": true}', "application/json")


def test_503_forever_fails_after_max_attempts(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    client, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(10**6, 503)
    sleep = SleepRecorder()
    store = store_via(proxy, bucket, sleep, max_attempts=3, initial_wait=0.1, max_wait=0.15)

    with pytest.raises(ArtifactWriteError) as err:
        store.create_png(PNG_PATH, PNG_A, metadata=META)

    message = str(err.value)
    assert proxy.upload_requests == 3
    assert len(sleep.calls) == 2
    assert all(wait <= 0.15 + 0.1 for wait in sleep.calls)  # capped by max_wait, plus the jitter
    assert err.value.transient  # the service may try it again within the step's budget
    assert f"gs://{bucket}/{PNG_PATH}" in message
    assert "3 attempts" in message
    assert "503" in message and "ServiceUnavailable" in message
    assert list_objects(client, bucket) == []


def test_403_fails_at_once_without_retry(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    _, bucket = gcs_bucket
    proxy = faulty_gcs_proxy(10**6, 403)
    sleep = SleepRecorder()

    with pytest.raises(ArtifactWriteError) as err:
        store_via(proxy, bucket, sleep).put_manifest(MANIFEST_PATH, b"{}")

    message = str(err.value)
    assert proxy.upload_requests == 1
    assert sleep.calls == []
    assert "1 attempt " in message and "not retried" in message
    assert "403" in message and "Forbidden" in message
    assert f"gs://{bucket}/{MANIFEST_PATH}" in message


def test_missing_bucket_fails_at_once_naming_the_bucket(gcs_emulator: GcsEmulator) -> None:
    sleep = SleepRecorder()
    store = GcsArtifactStore(make_storage_client(GCS_TEST_PROJECT), "no-such-bucket", clock=sleep)

    with pytest.raises(BucketUnusable) as err:  # not a write that failed: nothing can be written
        store.create_png(PNG_PATH, PNG_A, metadata=META)
    with pytest.raises(BucketUnusable, match="no-such-bucket"):
        store.put_manifest(MANIFEST_PATH, b"{}", still_ours=lambda: True)

    message = str(err.value)
    assert "no-such-bucket" in message
    assert "404" in message and "NotFound" in message
    assert sleep.calls == []


def test_connection_refused_is_transient_and_bounded() -> None:
    """Nothing listens on the endpoint: retried as a connection error, then reported."""
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleep = SleepRecorder()
    store = GcsArtifactStore(
        storage_client_for(f"http://127.0.0.1:{port}"),
        "b",
        requests=Backoff(attempts=2, base=0.2, cap=2.0, jitter=0.2),
        writes=Backoff(attempts=2, base=0.2, cap=2.0, jitter=0.2),
        timeout=5.0,
        clock=sleep,
    )

    with pytest.raises(ArtifactWriteError) as err:
        store.create_png(PNG_PATH, PNG_A, metadata=META)

    assert len(sleep.calls) == 1
    assert "2 attempts" in str(err.value) and "ConnectionError" in str(err.value)


def test_error_message_never_carries_credentials(gcs_bucket: Bucket, faulty_gcs_proxy: ProxyFactory) -> None:
    """A token sent as Authorization and echoed back by a misbehaving hop is not quoted."""
    _, bucket = gcs_bucket
    token = "ya29.secret-token-DO-NOT-LEAK"
    proxy = faulty_gcs_proxy(
        10**6, 403, error_message=f"caller Authorization: Bearer {token} denied (key={token})"
    )
    client = storage.Client(
        project=GCS_TEST_PROJECT,
        credentials=Credentials(token=token),
        client_options={"api_endpoint": proxy.url},
    )
    store = GcsArtifactStore(client, bucket, clock=SleepRecorder())

    with pytest.raises(ArtifactWriteError) as err:
        store.create_png(PNG_PATH, PNG_A, metadata=META)

    message = str(err.value)
    assert f"Bearer {token}" in proxy.authorization_headers  # the token really was sent
    assert token not in message
    assert "secret-token" not in message
    assert "denied" in message  # the server's explanation is still quoted, redacted
