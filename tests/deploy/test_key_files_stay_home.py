"""Whatever git ignores never leaves the machine: neither deploy.sh's `gcloud builds submit .`
(the upload, filtered by .gcloudignore) nor `docker build .` (the image's context, filtered by
.dockerignore) takes a file .gitignore names, wherever it lies: the accounts files with API keys,
.env*, *.local.json, caches, outputs.

A copy of the repository's tracked files gets one file for every line of .gitignore (git itself
confirms it ignores each), at the root and in the folders the upload and the image take. The
judges are the tools themselves: the installed Google Cloud CLI's `gcloud meta
list-files-for-upload` (no credential needed) and the docker client, which computes the build
context before it would send it to an engine (docker_context.py). A line added to .gitignore
gets its own planted file, so this fails until .dockerignore covers it too (.gcloudignore
includes .gitignore).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from docker_context import build_context, docker_client
from gcloud_cli import GcloudJudge

REPO = Path(__file__).resolve().parents[2]
# folders of the upload and of the image where a key file could be left: beside the templates
# (docs/configuration.md's accounts example), inside the package, beside deploy.sh
NESTED = ("chart-templates", "src/worker_chart_export", "deploy")
# what issue 38 found uploaded, besides one example per line
NAMED_IN_THE_ISSUE = ("accounts.json", "prod.accounts.json", "chart-templates/accounts.json")
PLANTED_TEXT = '[{"id": "planted", "apiKey": "planted-not-a-key"}]\n'


@pytest.fixture(scope="module")
def docker() -> Path:
    found = docker_client()
    if found is None:
        # a skip would check nothing: the client ships with this project's machines
        pytest.fail("no docker client (docker not on PATH): nothing to compute the build context with")
    return found


def ignore_lines() -> list[str]:
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def example_of(pattern: str) -> str:
    """A file path (relative to the checkout's root) that the .gitignore line `pattern` ignores."""
    if pattern.startswith("!") or "**" in pattern or "\\" in pattern or re.search(r"\[[!^]", pattern):
        raise ValueError(f".gitignore line {pattern!r}: example_of makes no file for this syntax yet")
    name = re.sub(r"\[(.)[^\]]*\]", r"\1", pattern).replace("*", "planted").replace("?", "p")
    return name.strip("/") + "/planted.bin" if name.endswith("/") else name.lstrip("/")


def planted_paths() -> list[str]:
    paths = list(NAMED_IN_THE_ISSUE)
    for pattern in ignore_lines():
        example = example_of(pattern)
        anchored = "/" in pattern.rstrip("/")  # gitignore: a slash before the end anchors it at the root
        paths += [example] if anchored else [example, *(f"{folder}/{example}" for folder in NESTED)]
    return sorted(set(paths))


def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def checkout_with_planted_files(root: Path) -> tuple[Path, list[str]]:
    """A copy of the tracked files plus a file for every line of .gitignore; (its root, those)."""
    for name in tracked_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    planted = planted_paths()
    for name in planted:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(PLANTED_TEXT)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=root,
        input="\n".join(planted),
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert [name for name in planted if name not in ignored] == [], "git does not ignore these examples"
    return root, planted


def uploaded(judge: GcloudJudge, root: Path) -> list[str]:
    verdict = judge.judge(["meta", "list-files-for-upload", str(root)], root, {})
    assert verdict.code == 0, verdict.output
    return verdict.output.splitlines()


def image_sources() -> list[str]:
    """The Dockerfile's COPY sources, e.g. ["pyproject.toml", "src/"]."""
    sources = []
    for line in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines():
        if line.startswith("COPY "):
            sources += [word for word in line.split()[1:-1] if not word.startswith("--")]
    return sources


def test_no_file_git_ignores_is_uploaded_or_sent_to_the_image(
    judge: GcloudJudge, docker: Path, tmp_path: Path
) -> None:
    root, planted = checkout_with_planted_files(tmp_path)
    assert {"src/worker_chart_export/.env", "deploy/planted.local.json"} <= set(planted)
    upload = uploaded(judge, root)
    context = build_context(docker, root)
    assert [name for name in planted if name in upload] == []
    assert [name for name in planted if name in context] == []
    # and every file the image is built from still travels
    sources = image_sources()
    assert {"pyproject.toml", "src/", "chart-templates/"} <= set(sources)
    needed = {name for name in tracked_files() if any(name.startswith(source) for source in sources)}
    assert sorted(needed - set(context)) == []
    assert sorted((needed | {"Dockerfile", ".dockerignore"}) - set(upload)) == []


def test_without_the_ignore_files_both_tools_would_take_the_planted_files(
    judge: GcloudJudge, docker: Path, tmp_path: Path
) -> None:
    """The judges see what they are shown: the test above can fail."""
    root, planted = checkout_with_planted_files(tmp_path)
    for name in (".gcloudignore", ".dockerignore"):
        (root / name).write_text("# nothing left out\n")  # an empty .gcloudignore: no default rules
    upload = uploaded(judge, root)
    context = build_context(docker, root)
    assert [name for name in planted if name not in upload] == []
    assert [name for name in planted if name not in context] == []


@pytest.mark.parametrize(
    ("pattern", "example"),
    [
        ("accounts.json", "accounts.json"),
        ("*.accounts.json", "planted.accounts.json"),
        (".env.*", ".env.planted"),
        ("out/", "out/planted.bin"),
        ("/build/", "build/planted.bin"),
        ("docs/*.key", "docs/planted.key"),
        ("*.py[cod]", "planted.pyc"),
    ],
)
def test_an_example_is_made_for_each_kind_of_line(pattern: str, example: str) -> None:
    assert example_of(pattern) == example


@pytest.mark.parametrize("pattern", ["!keep.json", "**/deep.json", "[!a]x.json", "a\\*b"])
def test_a_line_no_example_is_made_for_is_named(pattern: str) -> None:
    with pytest.raises(ValueError, match="example_of makes no file"):
        example_of(pattern)
