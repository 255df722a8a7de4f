"""The installed Google Cloud CLI as a judge of deploy.sh's calls, without an account.

gcloud parses a command completely before it needs a credential. Run with an empty
configuration (a fresh CLOUDSDK_CONFIG, no account), a call it rejects answers `Invalid choice`,
`unrecognized arguments` or `argument ...: ...` (exit 2, or 1 for values it checks itself); one
it accepts gets as far as `You do not currently have an active account selected` (or, for
`auth application-default ...`, `Your default credentials were not found`). A few need no
credential at all (`gcloud version`, `--help`) and simply run (exit 0).

`GcloudJudge` keeps the real CLI loaded in one process (gcloud_fork_server.py, under the Python
gcloud itself runs with) and forks it per call, which makes a verdict take ~0.05 s instead of a
fresh process's ~0.7 s; test_gcloud_judge.py checks that its verdicts are those of the `gcloud`
command itself.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NEEDS_CREDENTIAL = "You do not currently have an active account selected"
NEEDS_ADC = "Your default credentials were not found"
SERVER = Path(__file__).with_name("gcloud_fork_server.py")
# What a call may carry to the CLI: the properties deploy.sh sets (project, prompts). Never an
# account, a token or another configuration directory.
_PASSED_ON = ("CLOUDSDK_CORE_PROJECT", "CLOUDSDK_CORE_DISABLE_PROMPTS")


@dataclass(frozen=True)
class Verdict:
    code: int
    output: str

    @property
    def needs_credential(self) -> bool:
        """gcloud parsed the call and stopped where it needs a login or the ADC it lacks."""
        return NEEDS_CREDENTIAL in self.output or NEEDS_ADC in self.output

    @property
    def accepted(self) -> bool:
        """gcloud took the call: it ran to the credential step, or ran without needing one."""
        return self.needs_credential or self.code == 0

    @property
    def ran_offline(self) -> bool:
        return self.code == 0 and not self.needs_credential


def real_gcloud(not_in: Path | None = None) -> Path | None:
    """The installed `gcloud` (skipping a folder of fakes), or None."""
    path = os.environ.get("PATH", "")
    if not_in is not None:
        path = os.pathsep.join(p for p in path.split(os.pathsep) if Path(p) != not_in)
    found = shutil.which("gcloud", path=path)
    return Path(found) if found else None


def sdk_layout(gcloud: Path) -> tuple[Path, Path]:
    """(the SDK's lib folder, the Python gcloud runs with), as the `gcloud` wrapper picks it."""
    root = gcloud.resolve().parent.parent
    bundled = root / "platform" / "bundledpythonunix" / "bin" / "python3"
    python = os.environ.get("CLOUDSDK_PYTHON") or (str(bundled) if bundled.exists() else "python3")
    return root / "lib", Path(shutil.which(python) or python)


def isolated_env(config_dir: Path) -> dict[str, str]:
    """An environment in which gcloud has no account and no saved configuration."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLOUDSDK_", "GOOGLE_", "GCE_")) and k != "BOTO_CONFIG"
    }
    env.update(
        CLOUDSDK_CONFIG=str(config_dir),
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
    )
    return env


def passed_on(env: dict[str, str]) -> dict[str, str]:
    return {k: env[k] for k in _PASSED_ON if k in env}


class GcloudJudge:
    """The real CLI, loaded once, judging calls; start() then judge()/render(), then stop()."""

    def __init__(self, gcloud: Path, workdir: Path) -> None:
        self.gcloud = gcloud
        self.workdir = workdir
        self.socket_path = str(workdir / "gcloud.sock")
        self.config_dir = workdir / "config"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> GcloudJudge:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        lib, python = sdk_layout(self.gcloud)
        self.process = subprocess.Popen(
            [str(python), str(SERVER), str(lib), self.socket_path],
            stdout=subprocess.PIPE,
            text=True,
            env=isolated_env(self.config_dir),
            cwd=self.workdir,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline().strip()
        if ready != "ready":
            self.stop()
            raise RuntimeError(f"the gcloud fork server did not start ({python}, {lib}): {ready!r}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        return ask(self.socket_path, request)

    def judge(self, argv: list[str], cwd: Path, env: dict[str, str]) -> Verdict:
        answer = self._ask({"op": "execute", "argv": argv, "cwd": str(cwd), "env": passed_on(env)})
        return Verdict(answer["code"], answer["output"])


def ask(socket_path: str, request: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(socket_path)
        with connection.makefile("rwb") as stream:
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            answer: dict[str, Any] = json.loads(stream.readline())
    if "error" in answer:
        raise RuntimeError(f"gcloud fork server: {answer['error']}")
    return answer


def render(
    socket_path: str,
    resources: list[Any],
    fmt: str | None,
    *,
    flatten: list[str] | None = None,
    filter_expression: str | None = None,
    single: bool = False,
) -> str:
    """What `gcloud ... --filter --flatten --format` prints for these API resources."""
    request = {
        "op": "render",
        "resources": resources,
        "format": fmt,
        "flatten": flatten or [],
        "filter": filter_expression,
        "single": single,
    }
    output: str = ask(socket_path, request)["output"]
    return output


def judge_with_a_fresh_process(gcloud: Path, argv: list[str], cwd: Path, env: dict[str, str]) -> Verdict:
    """The same verdict from the `gcloud` command itself, in its own process (slow; for checks)."""
    with tempfile.TemporaryDirectory() as config:
        result = subprocess.run(
            [str(gcloud), *argv],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**isolated_env(Path(config)), **passed_on(env)},
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
    return Verdict(result.returncode, result.stdout + result.stderr)


def unknown_fields(socket_path: str, kind: str, text: str) -> list[str]:
    """Fields of a policy (`alert_policy`), metric (`log_metric`) or dashboard (`dashboard`)
    file the API does not have, read with the code `--policy-from-file` / `--config-from-file`
    use."""
    found: list[str] = ask(socket_path, {"op": "message", "kind": kind, "text": text})["unknown"]
    return found


def uploaded_files(socket_path: str, directory: Path) -> list[str]:
    """What `gcloud builds submit` would upload from directory, by gcloud's own .gcloudignore rules."""
    found: list[str] = ask(socket_path, {"op": "uploaded", "dir": str(directory)})["files"]
    return found
