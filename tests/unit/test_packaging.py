"""The package stands alone: a wheel carries the schemas, templates and fixtures (and the view's
page template), and the installed console script runs a step and renders its page from any
folder, with no checkout beside it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from harness.builders import REPO

# what a wheel is built from: the rest of the checkout must not matter
BUILD_INPUTS = ("pyproject.toml", "README.md", "src", "contracts", "chart-templates", "fixtures")
# development tools left out of the wheel (and so of the image)
DEV_ONLY = {"worker_chart_export.tools.devstack"}
# variables that would point the installed worker back at the checkout or change its mode
SCRUBBED = ("CHART_TEMPLATES_DIR", "CHARTS_FIXTURES_DIR", "CHARTS_API_MODE", "CHARTS_BUCKET", "PYTHONPATH")


def test_every_package_under_src_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    src = REPO / "src"
    found = {
        ".".join(init.parent.relative_to(src).parts)
        for init in src.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == DEV_ONLY, "add these packages to [tool.setuptools] packages in pyproject.toml"


def _can_build_without_the_index() -> bool:
    """setuptools builds wheels itself from 70.1; before that it needs the `wheel` package."""
    from importlib.metadata import version

    major, minor = (int(part) for part in version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.slow  # a wheel built, a venv made, five processes: the full lane's
def test_wheel_installed_outside_the_checkout_runs_the_sample(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    # Offline when this environment can build wheels; otherwise pip's build isolation
    # installs the backend from the configured index.
    isolation = ["--no-build-isolation"] if _can_build_without_the_index() else []
    built = _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        *isolation,
        "-w",
        tmp_path / "dist",
        source,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("worker_chart_export-*.whl")

    # A throwaway venv that borrows the dependencies (not the worker) from this environment:
    # a .pth line adds the folder to sys.path without running its own .pth files, so the
    # checkout's editable install stays out of it.
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path).returncode == 0
    python = venv / "bin" / "python"
    venv_site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp_path
        ).stdout.strip()
    )
    (venv_site / "_borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = _run(
        sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel, cwd=tmp_path
    )
    assert installed.returncode == 0, installed.stderr
    shutil.rmtree(source)  # nothing may be read from the copy the wheel was built from

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sample = shutil.copy2(REPO / "fixtures" / "flow_run.sample.json", elsewhere / "flow_run.json")
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    where = _run(
        python,
        "-c",
        "from worker_chart_export import bundled; print(bundled.contracts_dir())",
        cwd=elsewhere,
        env=env,
    )
    contracts = Path(where.stdout.strip())
    assert contracts.is_dir() and contracts.is_relative_to(venv_site / "worker_chart_export"), where.stderr
    # CHART-IMG's documented lists travel in contracts/chart-img/ and load from the wheel
    documented = _run(
        python,
        "-c",
        "from worker_chart_export.bundled import chart_img_docs as d; "
        "print(len(d.studies()), len(d.drawings()), len(d.timezones()), d.intervals().default)",
        cwd=elsewhere,
        env=env,
    )
    assert documented.stdout.split() == ["92", "15", "82", "1D"], documented.stderr
    assert (contracts / "chart-img" / "README.md").is_file()
    result = _run(
        venv / "bin" / "worker-chart-export",
        "run-local",
        "--flow-run-path",
        sample,
        "--output-dir",
        elsewhere / "out",
        cwd=elsewhere,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("CHART_EXPORT SUCCEEDED:"), result.stdout
    assert len(list((elsewhere / "out" / "gcs").rglob("*.png"))) == 3
    # the view's page template is package data too
    viewed = _run(venv / "bin" / "worker-chart-export", "view", elsewhere / "out", cwd=elsewhere, env=env)
    assert viewed.returncode == 0, viewed.stdout + viewed.stderr
    assert len(list((elsewhere / "out" / "view").glob("chart-view-*.html"))) == 1  # not in the mirror
    assert not list((elsewhere / "out" / "gcs").rglob("*.html"))
    # the dev stack is not in the wheel: `stack up` says how to get it, in one line, exit 2
    assert not (venv_site / "worker_chart_export" / "tools" / "devstack").exists()
    stack = _run(venv / "bin" / "worker-chart-export", "stack", "up", cwd=elsewhere, env=env)
    assert (stack.returncode, stack.stdout) == (2, ""), stack.stdout + stack.stderr
    assert stack.stderr.startswith("worker-chart-export stack: error: ") and "source checkout" in stack.stderr
    assert len(stack.stderr.splitlines()) == 1, stack.stderr


@pytest.mark.parametrize("name", ["contracts", "chart_templates", "fixtures"])
def test_the_checkout_reads_its_own_folders(name: str) -> None:
    from worker_chart_export import bundled

    # an editable install has no packaged copy: edits to the repository's folders show at once
    assert bundled.bundled_dir(name) == REPO / name.replace("_", "-")
