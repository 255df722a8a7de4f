"""run-local flags, precedence, summaries and exit codes; the installed console script too."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, SAMPLE_FLOW_RUN, chart_step, flow_run
from harness.firestore_emulator import free_port
from worker_chart_export.cli.main import main
from worker_chart_export.command_surface import command_line

SECRET_KEY = "test-key-5f0c2a9e8b7d4c1fa3e6b9d2c7f1e4a8"


def write_flow_run(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "flow_run.json"
    path.write_text(json.dumps(doc))
    return path


def run_local_argv(
    flow_run: Path | str = SAMPLE_FLOW_RUN, output_dir: Path | None = None, **flags: object
) -> list[str]:
    """run-local's argv: the flow_run, the output folder when given, then each of `flags` as
    --name=value (charts_api_mode="real" gives --charts-api-mode=real)."""
    argv = ["run-local", "--flow-run-path", str(flow_run)]
    if output_dir is not None:
        argv += ["--output-dir", str(output_dir)]
    return argv + [f"--{name.replace('_', '-')}={value}" for name, value in flags.items()]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CHARTS_API_MODE", "CHARTS_BUCKET", "CHART_IMG_ACCOUNTS_JSON", "CHARTS_LOCAL_OUTPUT_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_sample_succeeds_with_text_summary_and_second_run_is_noop(tmp_path: Path, capsys: Any) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, out_dir))
    assert code == 0, err
    first = out.splitlines()[0]
    assert first == (
        "CHART_EXPORT SUCCEEDED: manifest=gs://worker-chart-export-local/charts/"
        "run_20261122_btcusdt_0001/charts_1h/manifest.json, items=3, failures=0, minImages=2"
    )
    assert f"{out_dir / 'gcs'}/" in out  # says where the local copy is
    pngs = list((out_dir / "gcs").rglob("*.png"))
    assert len(pngs) == 3 and all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    start = [json.loads(line) for line in err.splitlines() if '"run-local started"' in line]
    assert start and start[0]["mode"] == "local" and start[0]["chartsApi"] == {"mode": "mock"}

    code, out, _ = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, out_dir))
    assert code == 1 and out.startswith("CHART_EXPORT NOOP")
    assert (
        json.loads(SAMPLE_FLOW_RUN.read_text())["steps"]["charts_1h"]["status"] == "READY"
    )  # sample untouched


def test_bucket_without_credentials_is_a_clear_error(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    code, out, err = run_cli(
        capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path, charts_bucket="gs://my-bucket")
    )
    assert code == 2 and out == ""
    assert "bucket 'my-bucket' is configured but no Google Cloud credentials" in err or "none.json" in err
    assert not list(tmp_path.rglob("*.json"))  # nothing was claimed


def test_json_summary_local(tmp_path: Path, capsys: Any) -> None:
    code, out, _ = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path, output_summary="json"))
    assert code == 0
    summary = json.loads(out)
    assert summary == summary | {
        "status": "SUCCEEDED",
        "stepId": "charts_1h",
        "itemsCount": 3,
        "failuresCount": 0,
        "minImages": 2,
        "chartsApiMode": "mock",
        "errorCode": None,
    }
    assert summary["outputsManifestGcsUri"].startswith("gs://worker-chart-export-local/charts/")


def test_none_summary_prints_nothing_on_stdout(tmp_path: Path, capsys: Any) -> None:
    code, out, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path, output_summary="none"))
    assert code == 0 and out == "" and '"step completed"' in err


def test_failed_step_exits_1(tmp_path: Path, capsys: Any) -> None:
    path = write_flow_run(tmp_path, flow_run({"charts": chart_step()}, symbol="ETHUSDT"))  # no fixtures
    code, out, _ = run_cli(capsys, *run_local_argv(path, tmp_path / "o"))
    assert code == 1 and out.startswith("CHART_EXPORT FAILED:") and "CHART_API_MOCK_MISSING" in out


def test_step_id_flag_picks_the_step_and_checks_its_type(tmp_path: Path, capsys: Any) -> None:
    doc = flow_run(
        {
            "a_charts": chart_step(),
            "b_charts": chart_step(),
            "llm": {"stepType": "LLM_REPORT", "status": "READY"},
        }
    )
    path = write_flow_run(tmp_path, doc)
    code, out, _ = run_cli(
        capsys, *run_local_argv(path, tmp_path / "o", step_id="b_charts", output_summary="json")
    )
    assert code == 0 and json.loads(out)["stepId"] == "b_charts"
    code, _, err = run_cli(capsys, *run_local_argv(path, step_id="llm"))
    assert code == 2 and "stepType 'LLM_REPORT', expected 'CHART_EXPORT'" in err
    code, _, err = run_cli(capsys, *run_local_argv(path, step_id="nope"))
    assert code == 2 and "'nope' not found" in err


def test_mode_flag_beats_env_and_env_beats_default(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CHARTS_API_MODE", "real")
    # env says real, no accounts: a configuration error (exit 2) that names the problem
    code, _, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path / "a"))
    assert code == 2 and "no CHART-IMG accounts configured" in err
    code, out, _ = run_cli(
        capsys,
        *run_local_argv(SAMPLE_FLOW_RUN, tmp_path / "b", charts_api_mode="mock", output_summary="json"),
    )
    assert code == 0 and json.loads(out)["chartsApiMode"] == "mock"


def test_bucket_flag_beats_env(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CHARTS_BUCKET", "from-env")
    from worker_chart_export.settings import load_settings

    assert load_settings({"charts_bucket": "gs://from-flag"}).charts_bucket == "from-flag"
    assert load_settings({}).charts_bucket == "from-env"
    assert load_settings({}).charts_bucket_configured


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run-local"], "--flow-run-path"),
        (run_local_argv("/nonexistent/x.json"), "No such file"),
        (run_local_argv("x", charts_api_mode="fake"), "invalid choice"),
        (run_local_argv("x", output_summary="yaml"), "invalid choice"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: Any) -> None:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2 and message in capsys.readouterr().err


def test_unparseable_flow_run_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, *run_local_argv(bad))
    assert code == 2 and "not valid JSON" in err
    bad.write_text(json.dumps({"steps": {}}))
    code, _, err = run_cli(capsys, *run_local_argv(bad))
    assert code == 2 and "has no runId" in err


def test_accounts_file_is_read_but_its_key_never_printed(tmp_path: Path, capsys: Any) -> None:
    accounts = tmp_path / "chart-img.accounts.local.json"
    accounts.write_text(json.dumps([{"id": "acc1", "apiKey": SECRET_KEY}]))
    code, out, err = run_cli(
        capsys,
        *run_local_argv(
            SAMPLE_FLOW_RUN, tmp_path / "o", accounts_config_path=accounts, output_summary="json"
        ),
    )
    assert code == 0
    produced = out + err + "".join(p.read_text(errors="ignore") for p in (tmp_path / "o").rglob("*.json"))
    assert SECRET_KEY not in produced


def test_malformed_accounts_file_is_a_clear_error_without_the_key(tmp_path: Path, capsys: Any) -> None:
    accounts = tmp_path / "accounts.json"
    accounts.write_text('[{"id": "acc1", "apiKey": "' + SECRET_KEY + '"},')
    code, out, err = run_cli(
        capsys,
        *run_local_argv(
            SAMPLE_FLOW_RUN, tmp_path / "o", accounts_config_path=accounts, charts_api_mode="real"
        ),
    )
    assert code == 2 and f"--accounts-config-path {accounts}: not valid JSON" in err
    assert SECRET_KEY not in out + err


def test_console_script_is_installed_and_runs(tmp_path: Path) -> None:
    script = shutil.which("worker-chart-export", path=str(Path(sys.executable).parent))
    assert script, "console script worker-chart-export is not installed next to the interpreter"
    result = subprocess.run(
        [script, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "CHARTS_API_MODE": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("CHART_EXPORT SUCCEEDED:")
    assert all(json.loads(line)["severity"] for line in result.stderr.splitlines())


@pytest.mark.parametrize("bucket", ["b", "gs://My_Bucket", "a/b", "gs://", "-bucket"])
def test_bad_bucket_name_is_a_usage_error_before_any_work(tmp_path: Path, capsys: Any, bucket: str) -> None:
    code, out, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path, charts_bucket=bucket))
    assert code == 2 and out == "" and "CHARTS_BUCKET" in err and "bucket name" in err
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize(
    ("accounts_json", "message"),
    [
        ("", "no CHART-IMG accounts configured"),
        ('[{"id": "acc1", "apiKey": "' + SECRET_KEY + '"', "not valid JSON"),
        ('[{"id": "acc1"}]', "apiKey"),
    ],
    ids=["none", "truncated", "no-key"],
)
def test_serve_refuses_to_start_on_bad_account_config(
    tmp_path: Path, accounts_json: str, message: str
) -> None:
    script = str(Path(sys.executable).parent / "worker-chart-export")
    port = str(free_port())  # never bound: the configuration is refused first
    env = {**os.environ, "CHARTS_API_MODE": "real", "CHART_IMG_ACCOUNTS_JSON": accounts_json, "PORT": port}
    result = subprocess.run([script, "serve"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert SECRET_KEY not in result.stdout + result.stderr


def test_two_flow_runs_with_the_same_file_name_keep_separate_state(tmp_path: Path, capsys: Any) -> None:
    out_dir = tmp_path / "out"
    for name, run_id in (("a", "run_a"), ("b", "run_b")):
        (tmp_path / name).mkdir()
        path = write_flow_run(tmp_path / name, flow_run({"charts": chart_step()}, run_id=run_id))
        code, out, err = run_cli(capsys, *run_local_argv(path, out_dir))
        assert code == 0, err
        assert out.startswith("CHART_EXPORT SUCCEEDED")
    assert sorted(p.name for p in (out_dir / "flow_runs").glob("*.json")) == ["run_a.json", "run_b.json"]


@pytest.mark.parametrize("trouble", ["output-dir-is-a-file", "corrupt-state"])
def test_unusable_output_is_a_usage_error_naming_it(tmp_path: Path, capsys: Any, trouble: str) -> None:
    out_dir = tmp_path / "out"
    if trouble == "output-dir-is-a-file":
        out_dir.write_text("not a folder")
        expected = f"--output-dir {out_dir}: cannot be used"
    else:
        (out_dir / "flow_runs").mkdir(parents=True)
        (out_dir / "flow_runs" / "run_20261122_btcusdt_0001.json").write_text("{oops")
        expected = "is unreadable"
    code, out, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, out_dir))
    assert code == 2 and out == "" and expected in err and "Traceback" not in err


def test_steps_that_are_not_a_map_are_named(tmp_path: Path, capsys: Any) -> None:
    path = write_flow_run(tmp_path, {"runId": "r", "steps": [chart_step()]})
    code, _, err = run_cli(capsys, *run_local_argv(path, tmp_path / "o"))
    assert code == 2 and "steps must be a map" in err


def test_noop_summary_does_not_claim_local_artifacts(tmp_path: Path, capsys: Any) -> None:
    path = write_flow_run(tmp_path, flow_run({"charts": chart_step(status="SUCCEEDED")}))
    code, out, _ = run_cli(capsys, *run_local_argv(path, tmp_path / "o"))
    assert (
        code == 1 and out == "CHART_EXPORT NOOP: no READY CHART_EXPORT step in the flow_run (NO_READY_STEP)\n"
    )


def test_a_second_run_says_how_to_run_the_step_again_and_that_works(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, Path("out")))[0] == 0
    code, out, _ = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, Path("out")))
    state = Path("out") / "flow_runs" / "run_20261122_btcusdt_0001.json"
    assert code == 1
    assert out.splitlines()[0] == (
        f"CHART_EXPORT NOOP: no READY CHART_EXPORT step in the flow_run state {state} (a step that ran is "
        "not run again): to run it again, delete that file or give another --output-dir (NO_READY_STEP)"
    )
    state.unlink()  # as the line says
    code, out, _ = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, Path("out")))
    assert code == 0 and out.startswith("CHART_EXPORT SUCCEEDED")


def test_the_summary_says_how_to_look_at_the_charts_and_that_works(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, Path("out")))
    assert code == 0
    [hint] = [line.removeprefix("look at them: ") for line in out.splitlines() if line.startswith("look at")]
    program, *argv = shlex.split(hint)
    assert program == command_line()
    assert argv == ["view", "out/gcs/worker-chart-export-local/charts/run_20261122_btcusdt_0001/charts_1h"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and out.startswith("SUCCEEDED: page written to file://")
    assert (tmp_path / "out" / "view" / "chart-view-run_20261122_btcusdt_0001-charts_1h.html").is_file()


def test_a_file_of_pending_steps_names_the_advance_that_makes_them_ready(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_flow_run(tmp_path, flow_run({"charts": chart_step(status="PENDING")}))
    code, out, _ = run_cli(capsys, *run_local_argv(path, Path("o")))
    assert code == 1
    [hint] = re.findall(r"advance_flow runs \((.+)\) \(NO_READY_STEP\)$", out.splitlines()[0])
    program, *argv = shlex.split(hint)
    assert program == command_line()  # the program as it can be typed here
    assert argv == ["advance", "--flow-run-path", str(path), "--output-dir", "o"]
    assert run_cli(capsys, *argv)[0] == 0  # the hint, as printed
    code, out, _ = run_cli(capsys, *run_local_argv(path, Path("o")))
    assert code == 0 and out.startswith("CHART_EXPORT SUCCEEDED"), out


def test_interrupt_exits_130(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import worker_chart_export.service.local_run as local_run

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(local_run, "execute_step", interrupted)
    code, _, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path))
    assert code == 130 and "interrupted" in err


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "CHART_TEMPLATES_DIR",
            "/nonexistent/templates",
            "CHART_TEMPLATES_DIR: /nonexistent/templates is not a folder",
        ),
        (
            "CHARTS_FIXTURES_DIR",
            "/nonexistent/fixtures",
            "CHARTS_FIXTURES_DIR: /nonexistent/fixtures is not a folder",
        ),
        ("CHART_IMG_BASE_URL", "api.chart-img.com", "CHART_IMG_BASE_URL"),
    ],
)
def test_misconfigured_folders_and_urls_stop_before_the_step_is_claimed(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    code, out, err = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, tmp_path))
    assert code == 2 and out == "" and message in err
    assert not list(tmp_path.rglob("*.json"))  # nothing claimed


def test_a_setting_from_a_flag_is_named_by_the_flag_and_its_problem_kept_whole(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = tmp_path / "accounts.json"
    accounts.write_text("")  # no accounts at all: the problem text itself names the variable
    code, out, err = run_cli(
        capsys,
        *run_local_argv(
            SAMPLE_FLOW_RUN, tmp_path / "o", accounts_config_path=accounts, charts_api_mode="real"
        ),
    )
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"worker-chart-export run-local: error: --accounts-config-path {accounts}: "
        "no CHART-IMG accounts configured: "
        "set CHART_IMG_ACCOUNTS_JSON, --accounts-config-path or CHART_IMG_ACCOUNTS_SECRET"
    )
    # the same bad bucket names the flag when a flag gave it, the variable when the environment did
    code, _, from_flag = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN, charts_bucket="Bad_Bucket"))
    assert code == 2 and from_flag.startswith(
        "worker-chart-export run-local: error: --charts-bucket (over CHARTS_BUCKET): "
    )
    monkeypatch.setenv("CHARTS_BUCKET", "Bad_Bucket")
    code, _, from_env = run_cli(capsys, *run_local_argv(SAMPLE_FLOW_RUN))
    assert code == 2 and from_env.startswith("worker-chart-export run-local: error: CHARTS_BUCKET: ")


def test_serve_warms_up_once_in_the_forked_worker_not_in_the_arbiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC channels do not survive a fork: the warm-up must run in gunicorn's worker."""
    import threading

    from worker_chart_export import bootstrap
    from worker_chart_export.cli import main as cli

    hooks: list[Any] = []
    warmed = threading.Event()
    calls: list[int] = []

    def fake_warm_up() -> float:
        calls.append(1)
        warmed.set()
        return 0.0

    monkeypatch.setattr(os, "register_at_fork", lambda *, after_in_child: hooks.append(after_in_child))
    monkeypatch.setattr(bootstrap, "warm_up", fake_warm_up)
    arbiter = os.getpid()
    cli._schedule_warm_up()
    assert len(hooks) == 1 and calls == []  # nothing runs in the process that forks

    monkeypatch.setattr(os, "getpid", lambda: arbiter + 1)  # now "in the child"
    hooks[0]()
    hooks[0]()  # a second fork seen by the same child (e.g. a subprocess) starts nothing
    assert warmed.wait(5)
    assert calls == [1]
