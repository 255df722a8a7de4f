"""scripts/bootstrap.sh, run on a copy of the checkout's locks whose `.venv/` holds stand-ins
for python (pip) and uv that only write down how they were called: pip installs uv alone from
its own lock and uv the rest, each file hash-checked; where uv fails, pip installs the same lock
and says so; a second run asks no installer while the locks are unchanged."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.builders import REPO

# what each stand-in was asked, one line per call, into calls.log beside the checkout
STAND_IN = '#!/bin/sh\necho "{name} $*" >>"$(dirname "$0")/../../calls.log"\n{exit}\n'
# pip's stand-in fails on requirements.lock alone when asked to: it still installs uv
PIP_EXIT = 'case "$*" in *"-r requirements.lock"*) exit {lock};; esac\nexit 0'
PIP = "python -m pip install --quiet --disable-pip-version-check"
PIP_FOR_UV = f"{PIP} --require-hashes -r requirements.uv.lock"
PIP_FOR_LOCK = f"{PIP} --require-hashes -r requirements.lock"
PIP_FOR_PROJECT = f"{PIP} --no-deps -e ."
UV = "uv pip install --quiet --python .venv/bin/python --system-certs"


def checkout(tmp_path: Path, uv_exit: int, pip_lock_exit: int = 0) -> Path:
    for name in ("requirements.uv.lock", "requirements.lock", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, exit_line in (("python", PIP_EXIT.format(lock=pip_lock_exit)), ("uv", f"exit {uv_exit}")):
        (bin_dir / name).write_text(STAND_IN.format(name=name, exit=exit_line))
        (bin_dir / name).chmod(0o755)
    return tmp_path


def bootstrap(root: Path, status: int = 0) -> tuple[list[str], str]:
    done = subprocess.run(
        ["bash", str(root / "scripts" / "bootstrap.sh")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == status, done.stderr
    log = root / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls, done.stderr


def test_pip_installs_uv_and_uv_the_lock_then_nothing_while_the_locks_are_unchanged(tmp_path: Path) -> None:
    root = checkout(tmp_path, uv_exit=0)
    calls, said = bootstrap(root)
    assert calls == [
        PIP_FOR_UV,
        f"{UV} --require-hashes -r requirements.lock",
        f"{UV} --no-deps -e .",
    ]
    assert "pip installs it instead" not in said
    assert bootstrap(root)[0] == []
    # a lock changed: both installers are asked again
    (root / "requirements.lock").write_text((root / "requirements.lock").read_text() + "\n")
    assert bootstrap(root)[0][0] == PIP_FOR_UV


def test_where_uv_fails_pip_installs_the_same_lock_and_says_so(tmp_path: Path) -> None:
    root = checkout(tmp_path, uv_exit=2)
    calls, said = bootstrap(root)
    assert calls == [PIP_FOR_UV, f"{UV} --require-hashes -r requirements.lock", PIP_FOR_LOCK, PIP_FOR_PROJECT]
    assert "bootstrap: uv could not install requirements.lock (above): pip installs it instead" in said
    assert bootstrap(root)[0] == []


def test_where_both_fail_the_set_up_fails_and_tries_again_next_time(tmp_path: Path) -> None:
    root = checkout(tmp_path, uv_exit=2, pip_lock_exit=1)
    calls, said = bootstrap(root, status=1)
    assert calls == [PIP_FOR_UV, f"{UV} --require-hashes -r requirements.lock", PIP_FOR_LOCK]
    assert "bootstrap: ready" not in said
    assert not (root / ".venv" / "installed-from.sha256").exists()
    assert bootstrap(root, status=1)[0][0] == PIP_FOR_UV
