"""deploy.sh run for real (no --dry-run) with a fake `gcloud` and `worker-chart-export` first on PATH.

The fake gcloud (fake_gcloud.py, served in the test's process to gcloud_stub.py on PATH) has the
installed CLI judge every call and answers as a live project would (fake_project.py), keeping
that project's state in `state.json` between calls and between deploys; the fake curl
(fake_curl.py) is the Firebase Rules API of the same project, judged by that API's discovery
document. The fake worker-chart-export hands `accounts` to the real CLI (the project's own
accounts parser) and records `templates sync` (with its project and
whether an emulator was still named) instead of writing to Firestore.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_gcloud import serving

from harness.builders import REPO

DEPLOY = REPO / "deploy" / "deploy.sh"
GCLOUD_STUB = Path(__file__).with_name("gcloud_stub.py")
FAKE_CURL = Path(__file__).with_name("fake_curl.py")
REAL_CLI = Path(sys.executable).parent / "worker-chart-export"
PROJECT_ID = "acme-charts"
PROJECT_NUMBER = "424242424242"
CONFIG = {
    "PROJECT_ID": PROJECT_ID,
    "REGION": "europe-west1",
    "FIRESTORE_LOCATION": "eur3",
    "CHARTS_BUCKET": "gs://acme-charts-public",
    "IMAGE_TAG": "abc1234",
}
ACCOUNTS = [
    {"id": "acc1", "apiKey": "k-acc1-not-a-real-key"},
    {"id": "acc2", "apiKey": "k-acc2-not-a-real-key"},
]

_FAKE_CLI = """#!/bin/sh
case "$1" in
  accounts) exec {real} "$@" ;;
  templates)
    seen="project=${{GOOGLE_CLOUD_PROJECT-}}|emulator=${{FIRESTORE_EMULATOR_HOST+set}}"
    echo "$*|$seen|plan=${{CHART_IMG_PLAN-}}" >> {log}
    echo "templates sync: 3 template(s) created" ;;
  *) echo "fake worker-chart-export: unexpected: $*" >&2; exit 2 ;;
esac
"""


@dataclass
class Deploy:
    code: int
    stdout: str
    stderr: str
    calls: list[list[str]]
    rejections: list[dict[str, Any]]
    templates_syncs: list[str]
    state: dict[str, Any]
    rules_calls: list[dict[str, Any]]

    def find(self, *prefix: str) -> list[list[str]]:
        return [c for c in self.calls if c[: len(prefix)] == list(prefix)]

    def resource(self, kind: str, key: str) -> dict[str, Any]:
        found: dict[str, Any] = self.state["resources"][kind][key]
        return found

    def bindings(self, target: str) -> set[tuple[str, str]]:
        return {(role, member) for role, member in self.state["iam"].get(target, [])}


class Sandbox:
    """One fake project (its state survives between deploys) and the tools in front of it."""

    def __init__(self, root: Path, socket_path: str) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state"
        for folder in (self.bin, self.state):
            folder.mkdir(parents=True, exist_ok=True)
        # -S: the stub and the fake curl need only the standard library; skipping `site` (and
        # the venv's path hooks) saves ~30 ms on each of a deploy's ~80 calls
        gcloud = self.bin / "gcloud"
        gcloud.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{GCLOUD_STUB}" "$@"\n')
        curl = self.bin / "curl"
        curl.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKE_CURL}" "$@"\n')
        cli = self.bin / "worker-chart-export"
        cli.write_text(_FAKE_CLI.format(real=REAL_CLI, log=self.state / "templates.log"))
        for tool in (gcloud, curl, cli):
            tool.chmod(0o755)
        self.accounts_file = root / "chart-img.accounts.json"
        self.accounts_file.write_text(json.dumps(ACCOUNTS))
        self.socket_path = socket_path

    def copy(self, root: Path) -> Sandbox:
        """Another sandbox starting from this one's project state."""
        other = Sandbox(root, self.socket_path)
        shutil.copy(self.state / "state.json", other.state / "state.json")
        return other

    def edit_state(self, change: Any) -> None:
        path = self.state / "state.json"
        state = json.loads(path.read_text())
        change(state)
        path.write_text(json.dumps(state))

    def env(self, **overrides: str) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(self.root),
            "ACCOUNTS_FILE": str(self.accounts_file),
            # set in the deployer's shell by a local stack: templates sync must not follow it
            "FIRESTORE_EMULATOR_HOST": "localhost:8681",
            "FAKE_GCLOUD_SERVER": serving(),
            "FAKE_GCLOUD_STATE": str(self.state),
            "FAKE_GCLOUD_SOCKET": self.socket_path,
            "FAKE_GCLOUD_PROJECT_NUMBER": PROJECT_NUMBER,
            "FAKE_GCLOUD_KILL_GROUP": "1",
            **CONFIG,
            **overrides,
        }

    def deploy(self, **overrides: str) -> Deploy:
        for log in ("calls.jsonl", "rejections.jsonl", "templates.log", "rules_calls.jsonl"):
            (self.state / log).unlink(missing_ok=True)
        # its own process group: a rejected call ends the deploy, and nothing else
        process = subprocess.run(
            ["bash", str(DEPLOY)],
            capture_output=True,
            text=True,
            env=self.env(**overrides),
            cwd=self.root,
            timeout=300,
            start_new_session=True,
        )
        return Deploy(
            process.returncode,
            process.stdout,
            process.stderr,
            [record["argv"] for record in self._jsonl("calls.jsonl")],
            self._jsonl("rejections.jsonl"),
            self._lines("templates.log"),
            json.loads(self._text("state.json") or '{"resources": {}, "iam": {}}'),
            self._jsonl("rules_calls.jsonl"),
        )

    def deploy_logs(self, name: str) -> list[dict[str, Any]]:
        """The records of a JSON-lines log of the fake (calls.jsonl, rejections.jsonl)."""
        return self._jsonl(name)

    def _text(self, name: str) -> str:
        path = self.state / name
        return path.read_text() if path.exists() else ""

    def _lines(self, name: str) -> list[str]:
        return self._text(name).splitlines()

    def _jsonl(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._lines(name)]


KILLED = -signal.SIGTERM  # how a deploy a rejected call ended looks to subprocess
