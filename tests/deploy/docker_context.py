"""The installed docker client as the judge of .dockerignore, without a Docker engine.

`docker build DIR` (the classic builder: DOCKER_BUILDKIT=0) reads DIR/.dockerignore, makes the
build context's tar itself, with moby's own pattern matcher, and only then sends it to the
engine (POST /build). No engine runs here, so DOCKER_HOST points the client at a stand-in that
answers its ping, keeps the tar it is sent and answers the build with one line; the files in
that tar are the context an engine would have received, as the client computed it.
"""

from __future__ import annotations

import http.server
import io
import os
import shutil
import socketserver
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any

API_VERSION = "1.41"  # what the stand-in says it speaks: the client sends no newer request


class _EngineStandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _UnixServer

    def do_HEAD(self) -> None:  # the client's ping, to learn the API version
        self._answer(b"OK", "text/plain", body=False)

    def do_GET(self) -> None:
        self._answer(b"OK", "text/plain")

    def do_POST(self) -> None:
        if not self.path.split("?")[0].endswith("/build"):
            self._answer(b'{"message": "not served by this stand-in"}', "application/json", status=404)
            return
        self.server.contexts.append(self._body())
        self._answer(b'{"stream": "context received\\n"}\n', "application/json")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = io.BytesIO()
        while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
            body.write(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk
        self.rfile.readline()  # the CRLF after the last, empty chunk
        return body.getvalue()

    def _answer(self, payload: bytes, content_type: str, *, status: int = 200, body: bool = True) -> None:
        self.send_response(status)
        self.send_header("Api-Version", API_VERSION)
        self.send_header("Ostype", "linux")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads no request log
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _EngineStandIn)
        self.contexts: list[bytes] = []

    def get_request(self) -> tuple[Any, Any]:
        connection, _ = super().get_request()
        return connection, ("docker client", 0)  # http.server logs a (host, port) pair


def docker_client() -> Path | None:
    found = shutil.which("docker")
    return Path(found) if found else None


def build_context(docker: Path, directory: Path) -> list[str]:
    """The files (not folders) of the context `docker build directory` sends, sorted."""
    with tempfile.TemporaryDirectory() as scratch:
        server = _UnixServer(os.path.join(scratch, "engine.sock"))
        serving = threading.Thread(target=server.serve_forever, daemon=True)
        serving.start()
        try:
            env = {
                "PATH": os.environ.get("PATH", ""),
                "HOME": scratch,
                "DOCKER_HOST": f"unix://{server.server_address}",
                "DOCKER_CONFIG": scratch,  # no one's credentials or contexts
                "DOCKER_BUILDKIT": "0",  # the classic builder: the client makes the context itself
            }
            done = subprocess.run(
                [str(docker), "build", "--quiet", str(directory)],
                capture_output=True,
                text=True,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
        finally:
            server.shutdown()
            server.server_close()
    if done.returncode != 0 or len(server.contexts) != 1:
        raise RuntimeError(f"docker build sent no context (exit {done.returncode}): {done.stderr.strip()}")
    with tarfile.open(fileobj=io.BytesIO(server.contexts[0]), mode="r:") as context:
        return sorted(member.name for member in context.getmembers() if not member.isdir())
