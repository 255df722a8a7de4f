"""The judge the real-CLI deploy tests rely on: it says what the `gcloud` command says, it can fail
a deploy, and the monitoring files are messages the Monitoring and Logging APIs take."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from deploy_sandbox import KILLED, Sandbox
from gcloud_cli import GcloudJudge, judge_with_a_fresh_process
from judge_client import unknown_fields, uploaded_files

from harness.builders import REPO

POLICY = "deploy/monitoring/chart_export_steps_failed.policy.json"
DASHBOARD = "deploy/monitoring/worker-chart-export.dashboard.json"
ENV = {"CLOUDSDK_CORE_PROJECT": "acme-charts", "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}


UPDATE_POLICY = ["alpha", "monitoring", "policies", "update", "p", f"--policy-from-file={POLICY}"]


@pytest.mark.parametrize(
    ("argv", "accepted"),
    [
        (["monitoring", "policies", "create", f"--policy-from-file={POLICY}"], False),  # GA lacks it
        (["alpha", "monitoring", "policies", "create", f"--policy-from-file={POLICY}"], True),
        ([*UPDATE_POLICY, "--notification-channels=c"], False),  # a flag of create, not update
        ([*UPDATE_POLICY, "--set-notification-channels=c"], True),
        (["pubsub", "subscriptions", "update", "s", "--ack-deadline=abc"], False),
        (["monitoring", "dashboards", "create", f"--config-from-file={DASHBOARD}"], True),  # GA has them
        (["monitoring", "dashboards", "update", "d", f"--config-from-file={DASHBOARD}"], True),
        (["monitoring", "dashboards", "update", "d", "--policy-from-file=x"], False),
        (["version"], True),
    ],
)
def test_the_judge_says_what_the_gcloud_command_says(
    judge: GcloudJudge, argv: list[str], accepted: bool
) -> None:
    # twice: the first call loads the command into the server, the second is forked from it loaded
    first, again = (judge.judge(argv, REPO, ENV) for _ in range(2))
    fresh = judge_with_a_fresh_process(judge.gcloud, argv, REPO, ENV)
    assert (first.accepted, again.accepted, fresh.accepted) == (accepted,) * 3, (first.output, fresh.output)
    assert first.code == again.code == fresh.code
    assert first.output == again.output


def test_a_rejected_call_ends_the_deploy_even_when_its_error_is_swallowed(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    env = {**sandbox.env(), "CLOUDSDK_CORE_PROJECT": "acme-charts"}
    script = "gcloud monitoring policies list >/dev/null 2>&1 || true; echo survived"
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, start_new_session=True
    )
    assert result.returncode == KILLED and "survived" not in result.stdout
    [rejection] = sandbox.deploy_logs("rejections.jsonl")
    assert rejection["argv"] == ["monitoring", "policies", "list"]
    assert (
        "Invalid choice: 'policies'" in rejection["output"]
        and "gcloud alpha monitoring" in rejection["output"]
    )


def test_a_call_the_fake_project_cannot_answer_is_a_rejection_too(judge: GcloudJudge, tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, judge.socket_path)
    env = {**sandbox.env(), "CLOUDSDK_CORE_PROJECT": "acme-charts"}
    env.pop("FAKE_GCLOUD_KILL_GROUP")
    argv = ["compute", "instances", "list"]  # a good command deploy.sh has no business making
    result = subprocess.run(
        [str(sandbox.bin / "gcloud"), *argv], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and "no answer" in result.stderr
    assert [r["argv"] for r in sandbox.deploy_logs("rejections.jsonl")] == [argv]


@pytest.mark.parametrize(
    "path", sorted((REPO / "deploy" / "monitoring").glob("*.json")), ids=lambda p: p.name
)
def test_monitoring_files_are_messages_the_api_takes(judge: GcloudJudge, path: Path) -> None:
    kinds = {".policy.json": "alert_policy", ".metric.json": "log_metric", ".dashboard.json": "dashboard"}
    [kind] = [kind for suffix, kind in kinds.items() if path.name.endswith(suffix)]
    assert unknown_fields(judge.socket_path, kind, path.read_text()) == []


def test_the_message_check_can_fail(judge: GcloudJudge) -> None:
    text = (REPO / POLICY).read_text().replace('"thresholdValue"', '"threshold"').replace('"OR"', '"EITHER"')
    found = unknown_fields(judge.socket_path, "alert_policy", text)
    assert sorted(found) == ["combiner", "conditions[0].conditionThreshold.threshold"]
    text = (REPO / DASHBOARD).read_text().replace('"xyChart"', '"xyGraph"', 1).replace('"ALIGN_SUM"', '"SUM"')
    found = unknown_fields(judge.socket_path, "dashboard", text)
    aligner = "widget.xyChart.dataSets[0].timeSeriesQuery.timeSeriesFilter.aggregation.perSeriesAligner"
    assert sorted(found) == [
        "mosaicLayout.tiles[1].widget.xyGraph",  # what is under an unknown field is not read
        *(f"mosaicLayout.tiles[{tile}].{aligner}" for tile in (2, 3, 4, 5)),
    ]


def test_cloud_build_gets_the_build_context_and_never_a_local_accounts_file(
    judge: GcloudJudge, tmp_path: Path
) -> None:
    """deploy.sh's `gcloud builds submit .` uploads the checkout as filtered by .gcloudignore."""
    (tmp_path / ".gcloudignore").write_text((REPO / ".gcloudignore").read_text())
    (tmp_path / ".gitignore").write_text((REPO / ".gitignore").read_text())
    kept = ["Dockerfile", ".dockerignore", "pyproject.toml", "src/pkg/mod.py", "chart-templates/t.json"]
    left_out = ["chart-img.accounts.json", "chart-img.accounts.local.json", ".env", ".venv/bin/python"]
    left_out += ["tests/test_x.py", ".git/HEAD", "out/demo/x.png", "src/pkg/__pycache__/mod.pyc"]
    for name in kept + left_out:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert uploaded_files(judge.socket_path, str(tmp_path)) == sorted(kept)
