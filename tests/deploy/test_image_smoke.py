"""The image's smoke (`bash scripts/build_image.sh`, named in README.md and deploy/README.md),
run with `--no-image`: the script's own smoke, with its own configuration for `serve` (nothing
here restates it, so the two cannot drift), on this checkout's `serve` as a served process
instead of the image (no container engine here). The script starts serve, waits for it to
listen or to stop, posts one CloudEvent as Eventarc does and reports the answer.

Issue 39: `serve` came to check its bucket before it listens, and the smoke started it with a
bucket and neither credentials nor an emulator: the image exited 2 at start, and nothing in the
test command ran the smoke's configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.builders import REPO
from harness.firestore_emulator import free_port

SCRIPT = REPO / "scripts" / "build_image.sh"


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_the_smoke_starts_serve_with_its_configuration_and_the_event_is_answered(tmp_path: Path) -> None:
    port = free_port()
    # serve's environment is the script's alone (env -i): this one only reaches the script
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PORT": str(port), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), "--no-image"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "event answered: HTTP 200" in done.stdout.splitlines()
    log = json_lines(done.stderr)  # serve's log, which the script prints after the smoke
    [serving] = [line for line in log if line["message"] == "serving the function"]
    assert (
        serving["port"],
        serving["chartsApiMode"],
        serving["chartsBucket"],
        serving["chartImgAccounts"],
    ) == (
        port,
        "real",
        "smoke-bucket",
        ["smoke"],
    )
    [answered] = [line for line in log if line.get("eventId") == "smoke-1"]
    assert (answered["code"], answered["runId"]) == ("NO_READY_STEP", "smoke1")


def test_the_help_says_what_no_image_does() -> None:
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "--no-image  the smoke alone, on this checkout's serve (.venv) instead of the image" in done.stdout
