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
command itself. What goes over the wire to it (the requests, a Verdict) is judge_client.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from judge_client import Verdict, judge, passed_on

SERVER = Path(__file__).with_name("gcloud_fork_server.py")


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

    def judge(self, argv: list[str], cwd: Path, env: dict[str, str]) -> Verdict:
        return judge(self.socket_path, argv, str(cwd), env)


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
