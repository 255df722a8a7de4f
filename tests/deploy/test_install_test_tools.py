"""scripts/install_test_tools.sh says what it installs, and how much, before apt-get runs, and
asks nothing. apt-get and id are fakes here: nothing is installed on this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.builders import REPO

SCRIPT = REPO / "scripts" / "install_test_tools.sh"
FAKE_APT = """#!/bin/sh
echo "APT-GET $* frontend=$DEBIAN_FRONTEND" >&2
if [ "$1" = install ]; then
  for p in "$@"; do
    case "$p" in
      shellcheck|chromium) printf '#!/bin/sh\\n' > "{bin}/$p"; /bin/chmod +x "{bin}/$p" ;;
      chromium-driver) printf '#!/bin/sh\\n' > "{bin}/chromedriver"; /bin/chmod +x "{bin}/chromedriver" ;;
    esac
  done
fi
"""


def run(tmp_path: Path, present: list[str], uid: str = "0") -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {"apt-get": FAKE_APT.replace("{bin}", str(bin_dir)), "id": f"#!/bin/sh\necho {uid}\n"}
    tools.update({name: "#!/bin/sh\n" for name in present})
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},  # no real chromium, shellcheck or apt-get in sight
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_it_lists_packages_sizes_and_reasons_before_apt_runs(tmp_path: Path) -> None:
    result = run(tmp_path, present=[])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    first_apt = next(i for i, line in enumerate(lines) if line.startswith("APT-GET"))
    announced = "\n".join(lines[:first_apt])
    assert "apt-get install -y shellcheck chromium chromium-driver" in announced
    assert "~116 packages, ~500 MB" in announced and "~20 MB" in announced
    assert "HTML view test" in announced and "shell script" in announced
    apt_calls = lines[first_apt:]
    assert apt_calls == [
        "APT-GET update -q frontend=noninteractive",
        "APT-GET install -y -q shellcheck chromium chromium-driver frontend=noninteractive",
    ]


def test_only_what_is_missing_is_announced_and_installed(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck"])
    assert result.returncode == 0, result.stderr
    assert "shellcheck:" not in result.stderr
    assert "APT-GET install -y -q chromium chromium-driver frontend=noninteractive" in result.stderr


def test_nothing_missing_means_nothing_said_or_run(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck", "chromium", "chromedriver"])
    assert (result.returncode, result.stderr) == (0, "")


def test_not_root_names_the_command_to_run_and_installs_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck"], uid="1000")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "missing test tools (chromium chromium-driver) and not root: "
        "run 'apt-get install -y chromium chromium-driver' as root"
    )
