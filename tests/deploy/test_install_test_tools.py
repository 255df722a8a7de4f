"""scripts/install_test_tools.sh says what it installs, and how much, before apt-get runs,
installs nothing apt merely recommends and upgrades nothing it names, and asks nothing.
apt-get and id are fakes here: nothing is installed on this machine. The fake's simulation
(`apt-get install -s`) answers in apt's own words: `Inst name (version ...)` for a new
package, `Inst name [installed] (version ...)` for an upgrade."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.builders import REPO

SCRIPT = REPO / "scripts" / "install_test_tools.sh"
FLAGS = "-y -q --no-install-recommends --no-upgrade"
# what apt-get -s answered on Debian bookworm for the three, trimmed to a few lines
SIMULATION = {
    "shellcheck": ["Inst shellcheck (0.9.0-1 Debian:12.15/oldstable [amd64])"],
    "chromium": [
        "Inst chromium-common (156.0.8078.108-1~deb12u1 Debian:12.15/oldstable [amd64])",
        "Inst chromium (156.0.8078.108-1~deb12u1 Debian:12.15/oldstable [amd64])",
        "Inst libgtk-3-0 (3.24.38-2~deb12u3 Debian:12.15/oldstable [amd64])",
    ],
    "chromium-driver": ["Inst chromium-driver (156.0.8078.108-1~deb12u1 Debian:12.15/oldstable [amd64])"],
}
FAKE_APT = """#!/bin/sh
echo "APT-GET $* frontend=$DEBIAN_FRONTEND" >&2
[ "$1" = install ] || exit 0
simulate=no
for p in "$@"; do
  [ "$p" = -s ] && simulate=yes
done
for p in "$@"; do
  if [ $simulate = yes ]; then
    case "$p" in
{simulation}
    esac
    continue
  fi
  case "$p" in
    shellcheck|chromium) printf '#!/bin/sh\\n' > "{bin}/$p"; /bin/chmod +x "{bin}/$p" ;;
    chromium-driver) printf '#!/bin/sh\\n' > "{bin}/chromedriver"; /bin/chmod +x "{bin}/chromedriver" ;;
  esac
done
"""


def run(
    tmp_path: Path, present: list[str], uid: str = "0", upgrade: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    lines = {name: [*answer] for name, answer in SIMULATION.items()}
    if upgrade:
        lines["chromium"].append(f"Inst {upgrade} [252.38-1~deb12u1] (252.39-1~deb12u2 Debian:12.15 [amd64])")
    simulation = "\n".join(
        f"      {name}) echo '" + "'; echo '".join(answer) + "' ;;" for name, answer in lines.items()
    )
    apt = FAKE_APT.replace("{bin}", str(bin_dir)).replace("{simulation}", simulation)
    tools = {"apt-get": apt, "id": f"#!/bin/sh\necho {uid}\n"}
    tools.update({name: "#!/bin/sh\n" for name in present})
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), **env},  # no real chromium, shellcheck or apt-get in sight
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_it_lists_packages_sizes_and_reasons_before_apt_runs(tmp_path: Path) -> None:
    result = run(tmp_path, present=[])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    first_apt = next(i for i, line in enumerate(lines) if line.startswith("APT-GET"))
    announced = "\n".join(lines[:first_apt])
    assert f"apt-get install {FLAGS} shellcheck chromium chromium-driver" in announced
    assert "26 packages on this project's machines (~133 MB download, ~430 MB on disk)" in announced
    assert "~19 MB on disk" in announced
    assert "HTML view test" in announced and "shell script" in announced
    assert "no recommended package, no upgrade of an installed one" in announced
    assert "SKIP_BROWSER_TEST=1 bash scripts/test.sh" in announced
    assert [line for line in lines if line.startswith("APT-GET")] == [
        "APT-GET update -q frontend=noninteractive",
        f"APT-GET install -s {FLAGS} shellcheck chromium chromium-driver frontend=noninteractive",
        f"APT-GET install {FLAGS} shellcheck chromium chromium-driver frontend=noninteractive",
    ]


def test_the_simulation_names_every_package_and_no_upgrade_before_the_install(tmp_path: Path) -> None:
    result = run(tmp_path, present=[])
    lines = result.stderr.splitlines()
    install = lines.index(
        f"APT-GET install {FLAGS} shellcheck chromium chromium-driver frontend=noninteractive"
    )
    said = lines[install - 2 : install]
    assert said == [
        "install_test_tools.sh: installing 5 package(s): shellcheck chromium-common chromium libgtk-3-0 "
        "chromium-driver",
        "install_test_tools.sh: upgrading: none",
    ]


def test_an_upgrade_a_new_package_needs_is_named_before_it_happens(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck"], upgrade="libudev1")
    assert result.returncode == 0, result.stderr
    assert (
        "install_test_tools.sh: upgrading 1 installed package(s) a new one needs in a newer version: libudev1"
        in result.stderr.splitlines()
    )


def test_only_what_is_missing_is_announced_and_installed(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck"])
    assert result.returncode == 0, result.stderr
    assert "shellcheck:" not in result.stderr
    assert f"APT-GET install {FLAGS} chromium chromium-driver frontend=noninteractive" in result.stderr


def test_without_the_browser_test_chromium_is_not_installed(tmp_path: Path) -> None:
    result = run(tmp_path, present=[], SKIP_BROWSER_TEST="1")
    assert result.returncode == 0, result.stderr
    assert f"APT-GET install {FLAGS} shellcheck frontend=noninteractive" in result.stderr
    assert "chromium" not in result.stderr
    nothing = run(tmp_path / "again", present=["shellcheck"], SKIP_BROWSER_TEST="1")
    assert (nothing.returncode, nothing.stderr) == (0, "")


def test_nothing_missing_means_nothing_said_or_run(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck", "chromium", "chromedriver"])
    assert (result.returncode, result.stderr) == (0, "")


def test_not_root_names_the_command_to_run_and_installs_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, present=["shellcheck"], uid="1000")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "missing test tools (chromium chromium-driver) and not root: "
        f"run 'apt-get install {FLAGS} chromium chromium-driver' as root",
        "(chromium not wanted: SKIP_BROWSER_TEST=1 bash scripts/test.sh installs neither chromium package "
        "and leaves the browser test out)",
    ]
