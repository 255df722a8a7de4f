"""Issue 25's redaction through every exit of the served process: `worker-chart-export serve`
in its own process (gunicorn, its forked worker, Flask), its accounts holding a key, driven by
requests that carry forms of that key to where the process writes text of its own making:

- (a) 400 answers: ours, `not a decodable CloudEvent: <reason>`, whose reason quotes the
  exception (a background event with the key as a field name); functions-framework's own,
  which quotes the whole request, headers and body (the key as a CloudEvent's specversion
  header, as a background event's type);
- (c) a stdlib logging line: gunicorn's error log names the request line it refused
  (written at GUNICORN_LOG_LEVEL=warning, functions-framework's setting for gunicorn's log), in
  the forked worker, through a handler gunicorn made after `serve` wrapped its streams.

The reaper's 503 (b) quotes a Firestore error, which no request can make hold a key: its
answer is tested in-process (tests/unit/functions/test_main_flow.py).

Judged by tests/harness/secret_scan over every answer body and everything the process wrote
(stdout and stderr) meanwhile: each line is written before the answer is sent, so what a test
reads once it has its answers is complete. Each request's answer and line is checked to be
there with `<redacted>` in it (a redaction, not a path never taken).
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.stack import Worker, start_worker, worker_command
from harness.chart_img_server import new_key
from harness.firestore_emulator import FirestoreEmulator, free_port
from harness.gcs_emulator import GcsEmulator, storage_client_for
from harness.secret_scan import key_forms, leaks, scan_text
from worker_chart_export.core.redaction import REDACTED

pytestmark = pytest.mark.emulators

KEY = new_key()  # test-key-<hex>: the suite-wide scan knows its shape too
# the forms a request can carry, each where the process quotes it (base64 is found whole only)
FORMS = {name: form for name, form in key_forms(KEY).items() if not name.startswith("base64_urlsafe")}


@dataclass
class Served:
    worker: Worker

    def exchange(
        self, request_line: bytes, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, str]:
        """One request over a connection of its own: the answer's status and body."""
        return http_exchange(self.worker.port, request_line, headers or {}, body)

    def output(self) -> str:
        return self.worker.log_path.read_text(encoding="utf-8", errors="replace")


def http_exchange(
    port: int, request_line: bytes, headers: dict[str, str], body: bytes = b""
) -> tuple[int, str]:
    """A raw HTTP/1.1 exchange, so that a request line no client library sends can be sent;
    the answer read to its end (the server closes the connection)."""
    head = [request_line, b"Host: 127.0.0.1", b"Connection: close", f"Content-Length: {len(body)}".encode()]
    head += [f"{name}: {value}".encode() for name, value in headers.items()]
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, answer_body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), answer_body.decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def served(
    firestore_emulator: FirestoreEmulator, gcs_emulator: GcsEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    bucket = f"redaction-{uuid.uuid4().hex[:12]}"
    storage_client_for(gcs_emulator.url).create_bucket(bucket)
    worker = start_worker(
        free_port(),
        {
            "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
            "GOOGLE_CLOUD_PROJECT": firestore_emulator.project,
            "STORAGE_EMULATOR_HOST": gcs_emulator.url,
            "CHARTS_BUCKET": bucket,
            # real mode: the accounts are parsed at start-up (a CHART-IMG that is never called)
            "CHARTS_API_MODE": "real",
            "CHART_IMG_BASE_URL": f"http://127.0.0.1:{free_port()}",
            "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": KEY}]),
            "GUNICORN_LOG_LEVEL": "warning",
            "APP_ENV": "e2e",
        },
        tmp_path_factory.mktemp("served-redaction") / "serve.log",
        command=[worker_command(0)[0], "serve"],
    )
    try:
        yield Served(worker)
    finally:
        worker.stop()


def background_event(context: dict[str, object]) -> bytes:
    """A legacy background event (no specversion): functions-framework converts it."""
    return json.dumps({"context": context, "data": {}}).encode()


POST = b"POST / HTTP/1.1"
JSON = {"Content-Type": "application/json"}
ESCAPED_REDACTED = REDACTED.replace("<", "&lt;").replace(">", "&gt;")  # in an HTML page


def judge(served: Served, bodies: list[str], output_before: str) -> str:
    """No form of the key in the answers or in what the process wrote meanwhile; returns that."""
    written = served.output()[len(output_before) :]
    assert leaks(bodies, [KEY]) == [], "an answer carries the key"
    assert leaks([written], [KEY]) == [], "the served process wrote the key"
    assert scan_text("\n".join([written, *bodies]), "the served process") == []
    return written


def test_our_400_quotes_the_exception_without_the_key(served: Served) -> None:
    before, bodies = served.output(), []
    for name, form in FORMS.items():  # the reason names the background event's unknown field
        status, body = served.exchange(POST, JSON, background_event({form: 1}))
        assert status == 400 and "not a decodable CloudEvent: TypeError" in body, (name, status)
        assert ESCAPED_REDACTED in body, name
        bodies.append(body)
    judge(served, bodies, before)


def test_functions_frameworks_400_quotes_the_request_without_the_key(served: Served) -> None:
    before, bodies = served.output(), []
    for name, form in FORMS.items():  # a CloudEvent header that fails decoding, then the body
        headers = {**JSON, "ce-specversion": form}
        status, body = served.exchange(POST, headers, background_event({"eventType": form}))
        assert status == 400 and "Got HTTP headers" in body, (name, status)
        assert body.count(ESCAPED_REDACTED) >= 3, name  # the header, the body, the exception
        bodies.append(body)
    judge(served, bodies, before)


def test_gunicorns_log_line_and_page_for_a_refused_request_line_hold_no_key(served: Served) -> None:
    before, bodies = served.output(), []
    for name, form in FORMS.items():  # a byte HTTP forbids in a target: gunicorn refuses the line
        status, body = served.exchange(f"GET /?k={form}\x7f HTTP/1.1".encode())
        assert status == 400 and "Invalid HTTP request line" in body, (name, status)
        assert ESCAPED_REDACTED in body, name
        bodies.append(body)
    written = judge(served, bodies, before)
    # gunicorn's stdlib logger, in the forked worker: one line for each, each redacted
    refusals = [line for line in written.splitlines() if "Invalid request from ip=" in line]
    assert len(refusals) == len(FORMS) and all(REDACTED in line for line in refusals), written[-3000:]
