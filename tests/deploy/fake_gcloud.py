"""The `gcloud` deploy.sh finds first on PATH in tests/deploy/test_deploy_real_cli.py.

Each call is recorded, then judged by the installed Google Cloud CLI (gcloud_cli.GcloudJudge,
no account): a call it rejects, or one this fake has no answer for, is written to
rejections.jsonl and ends the whole deploy at once (SIGTERM to its process group: a rejected
look-up must not pass for "absent"). A call the CLI runs without a credential (`version`,
`--help`) gets the CLI's own output. Every other call is answered by fake_project.Project, a
project that keeps its state between calls and between deploys.

Environment: FAKE_GCLOUD_STATE (a folder: state.json, calls.jsonl, rejections.jsonl),
FAKE_GCLOUD_SOCKET (the judge), FAKE_GCLOUD_PROJECT_NUMBER, FAKE_GCLOUD_KILL_GROUP=1 to end the
deploy's process group on a rejection. FAKE_GCLOUD_CREDENTIALS: `none` (no login and no
Application Default Credentials) or `no-adc` (a login, no ADC): a call that needs what is
missing gets the real CLI's own answer without it, word for word, and its exit status.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from functools import partial
from pathlib import Path

from fake_project import Project
from gcloud_cli import Verdict, ask, passed_on, render


def _append(path: Path, record: dict[str, object]) -> None:
    with path.open("a") as log:
        log.write(json.dumps(record) + "\n")


def _reject(state: Path, argv: list[str], why: str, output: str) -> int:
    _append(state / "rejections.jsonl", {"argv": argv, "why": why, "output": output})
    sys.stderr.write(output if output.endswith("\n") else output + "\n")
    sys.stderr.flush()
    if os.environ.get("FAKE_GCLOUD_KILL_GROUP") == "1":
        os.killpg(os.getpgrp(), signal.SIGTERM)
    return 2


def _lacks_credential(argv: list[str], verdict: Verdict) -> bool:
    """What the deployer lacks here: the real CLI stopped at that very credential."""
    missing = os.environ.get("FAKE_GCLOUD_CREDENTIALS", "")
    adc = argv[:2] == ["auth", "application-default"]
    return verdict.needs_credential and (missing == "none" or (missing == "no-adc" and adc))


def main(argv: list[str]) -> int:
    state = Path(os.environ["FAKE_GCLOUD_STATE"])
    socket_path = os.environ["FAKE_GCLOUD_SOCKET"]
    cwd = Path.cwd()
    _append(state / "calls.jsonl", {"argv": argv, "cwd": str(cwd)})
    request = {"op": "execute", "argv": argv, "cwd": str(cwd), "env": passed_on(dict(os.environ))}
    answer = ask(socket_path, request)
    verdict = Verdict(answer["code"], answer["output"])
    if not verdict.accepted:
        return _reject(state, argv, "rejected by the real gcloud", verdict.output)
    if verdict.ran_offline:
        sys.stdout.write(verdict.output)
        return 0
    if _lacks_credential(argv, verdict):
        sys.stderr.write(verdict.output)
        return 1
    project_id = os.environ.get("CLOUDSDK_CORE_PROJECT", "")
    number = os.environ.get("FAKE_GCLOUD_PROJECT_NUMBER", "123456789012")
    project = Project(state / "state.json", project_id, number, partial(render, socket_path))
    try:
        result = project.answer(argv, cwd)
    except Exception as exc:  # a defect of this fake must end the deploy too, visibly
        return _reject(state, argv, "fake_project failed", f"fake gcloud: {type(exc).__name__}: {exc}")
    if result is None:
        return _reject(state, argv, "no answer in fake_project", "fake gcloud: no answer for this command")
    code, out, err = result
    if code == 0:
        project.save()
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
