"""PROJECT_ID and REGION are checked before deploy.sh changes anything: the project ID against
Google's documented form, REGION by its form and, when gcloud has a login, against the regions
`gcloud run regions list` names. A dry run without a login says what it could not check.

Issue 39: `REGION=europe-wst1` and `PROJECT_ID=My_Project` passed every check, and a real run
failed only after enabling APIs and creating the database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_deploy_dry_run import DEPLOY, SAMPLE, dry_run

PROJECT_ID_PROBLEM = (
    "is not a project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a letter, not "
    "ending with a hyphen (the ID, not the project's name: 'gcloud projects list' shows both)"
)
REGION_PROBLEM = (
    "is not a region name: lowercase letters, a hyphen, lowercase letters and a number, like "
    "europe-west1 ('gcloud run regions list' names Cloud Run's)"
)
NO_LOGIN_LINE = (
    "# no gcloud login here ('gcloud auth print-access-token' fails): this dry run asks Google Cloud "
    "nothing, so REGION {region} is checked by its form only, not against Cloud Run's regions; a real "
    "run would stop at this preflight"
)
REGIONS_LISTED = ["europe-north1", "europe-west1", "europe-west4", "us-central1"]
# A gcloud with a login: it answers the two questions a dry run may ask, and records every call.
_FAKE_GCLOUD = """import json, sys
from pathlib import Path
Path({calls!r}).open("a").write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["auth", "print-access-token"]:
    print("ya29.not-a-token")
elif sys.argv[1:4] == ["run", "regions", "list"]:
    if {refuse!r}:
        sys.exit(print({refuse!r}, file=sys.stderr) or 1)
    print("\\n".join({regions!r}))
else:
    sys.exit(1)
"""


def deploy(tmp_path: Path, *args: str, **overrides: str) -> subprocess.CompletedProcess[str]:
    """deploy.sh with a gcloud that records its calls and has no login."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    gcloud = fake_bin / "gcloud"
    gcloud.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls.log"}\nexit 1\n')
    gcloud.chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "HOME": str(tmp_path), **SAMPLE, **overrides}
    return subprocess.run(["bash", str(DEPLOY), *args], capture_output=True, text=True, env=env, timeout=60)


def logged_in_dry_run(
    tmp_path: Path, region: str, refuse: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """deploy.sh --dry-run with a gcloud that has a login; its calls, one per line."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "gcloud.py"
    script.write_text(_FAKE_GCLOUD.format(calls=str(calls), refuse=refuse, regions=REGIONS_LISTED))
    (fake_bin / "gcloud").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    (fake_bin / "gcloud").chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "HOME": str(tmp_path), **SAMPLE, "REGION": region}
    result = subprocess.run(
        ["bash", str(DEPLOY), "--dry-run"], capture_output=True, text=True, env=env, timeout=60
    )
    return result, calls.read_text().splitlines()


@pytest.mark.parametrize(
    "project_id",
    [
        "My_Project",  # a display name
        "acme",  # 4 characters
        "1acme-charts",  # a digit first
        "acme-charts-",  # a hyphen last
        "acme.charts",
        "a" + "b" * 29 + "c",  # 31 characters
    ],
)
def test_a_project_id_google_would_refuse_is_refused_before_any_call(tmp_path: Path, project_id: str) -> None:
    result = deploy(tmp_path, "--dry-run", PROJECT_ID=project_id)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"deploy.sh: PROJECT_ID: '{project_id}' {PROJECT_ID_PROBLEM}"]
    assert not (tmp_path / "calls.log").exists()


@pytest.mark.parametrize("project_id", ["acme-1", "a" + "b-" * 14 + "c"])  # 6 and 30 characters
def test_project_ids_at_the_edges_of_the_form_pass(tmp_path: Path, project_id: str) -> None:
    assert len(project_id) in (6, 30)
    run = dry_run(tmp_path, PROJECT_ID=project_id)
    assert run.config["PROJECT_ID"] == project_id


@pytest.mark.parametrize("region", ["Europe-West1", "europe west1", "europe-west", "europewest1", "eur3"])
def test_a_region_not_shaped_like_one_is_refused_before_any_call(tmp_path: Path, region: str) -> None:
    result = deploy(tmp_path, "--dry-run", REGION=region)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"deploy.sh: REGION: '{region}' {REGION_PROBLEM}"]
    assert not (tmp_path / "calls.log").exists()


def test_both_are_named_at_once_one_line_each_in_a_real_run_too(tmp_path: Path) -> None:
    result = deploy(tmp_path, PROJECT_ID="My_Project", REGION="Europe-West1")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"deploy.sh: PROJECT_ID: 'My_Project' {PROJECT_ID_PROBLEM}",
        f"deploy.sh: REGION: 'Europe-West1' {REGION_PROBLEM}",
    ]
    assert not (tmp_path / "calls.log").exists()  # not even the preflight's gcloud version


def test_a_dry_run_without_a_login_says_so_and_what_it_could_not_check(tmp_path: Path) -> None:
    run = dry_run(tmp_path, REGION="europe-wst1")  # shaped like a region: only a list would tell
    assert run.notes[1] == NO_LOGIN_LINE.format(region="europe-wst1")
    assert [line for line in run.notes if "no gcloud login" in line] == [run.notes[1]]
    assert ["gcloud", "run", "regions", "list", "--format=value(locationId)"] in run.probes
    assert "#   a real run stops here if REGION europe-wst1 is not among them" in "\n".join(run.notes)


def test_a_dry_run_with_a_login_refuses_a_region_cloud_run_does_not_list(tmp_path: Path) -> None:
    result, calls = logged_in_dry_run(tmp_path, "europe-wst1")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "deploy.sh: REGION: 'europe-wst1' is not a Cloud Run region (Cloud Run's europe-* regions: "
        "europe-north1, europe-west1, europe-west4)",
        "deploy.sh: stopped before changing anything",
    ]
    assert "services enable" not in result.stdout  # it stopped at the preflight
    # the only calls: the login, then the list (read-only both)
    assert calls == [
        '["auth", "print-access-token"]',
        '["run", "regions", "list", "--format=value(locationId)"]',
    ]


def test_a_dry_run_with_a_login_finds_a_listed_region_and_carries_on(tmp_path: Path) -> None:
    result, _ = logged_in_dry_run(tmp_path, "europe-west4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "#   REGION europe-west4 is one of Cloud Run's regions" in lines
    assert not [line for line in lines if "no gcloud login" in line]
    assert any(line.startswith("gcloud services enable") for line in lines)


def test_a_region_list_that_cannot_be_read_leaves_region_on_its_form_and_says_so(tmp_path: Path) -> None:
    refusal = "ERROR: (gcloud.run.regions.list) PERMISSION_DENIED: Cloud Run Admin API has not been used"
    result, _ = logged_in_dry_run(tmp_path, "europe-west1", refuse=refusal)
    assert result.returncode == 0, result.stderr
    assert (
        "#   REGION europe-west1 is checked by its form only: Cloud Run's list of regions could not be "
        "read (gcloud: PERMISSION_DENIED: Cloud Run Admin API has not been used)"
    ) in result.stdout.splitlines()
