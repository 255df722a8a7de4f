"""The `gcloud` deploy.sh meets in tests/deploy/test_deploy_real_cli.py, served from the test's
own process: the command on PATH is gcloud_stub.py, which hands each call (argv, folder,
environment) to the server here and plays its answer back.

Each call is recorded, then judged by the installed Google Cloud CLI (gcloud_cli.GcloudJudge,
asked over judge_client.py; no account): a call it rejects, or one this fake has no answer
for, is written to rejections.jsonl and ends the whole deploy at once (SIGTERM to its process
group: a rejected look-up must not pass for "absent"). A call the CLI runs without a credential
(`version`, `--help`) gets the CLI's own output. Every other call is answered by
fake_project.Project, a project that keeps its state between calls and between deploys.

The call's environment says where: FAKE_GCLOUD_STATE (a folder: state.json, calls.jsonl,
rejections.jsonl), FAKE_GCLOUD_SOCKET (the judge), FAKE_GCLOUD_PROJECT_NUMBER,
FAKE_GCLOUD_KILL_GROUP=1 to end the deploy's process group on a rejection.
FAKE_GCLOUD_CREDENTIALS: `none` (no login and no Application Default Credentials) or `no-adc`
(a login, no ADC): a call that needs what is missing gets the real CLI's own answer without
it, word for word, and its exit status.

Served rather than started per call: a deploy makes ~80 calls, and a Python process importing
this fake cost ~70 ms of CPU each before it did anything; the stub imports only built-in
modules.
"""

from __future__ import annotations

import atexit
import json
import marshal
import shutil
import socketserver
import tempfile
import threading
from functools import cache, partial
from pathlib import Path
from typing import NamedTuple

from fake_project import Project
from judge_client import Verdict, judge, render


class Reply(NamedTuple):
    """What the stub plays back: its exit status, its output, and whether it ends the deploy."""

    code: int
    stdout: str = ""
    stderr: str = ""
    end_group: bool = False


def _append(path: Path, record: dict[str, object]) -> None:
    with path.open("a") as log:
        log.write(json.dumps(record) + "\n")


def _reject(state: Path, argv: list[str], why: str, output: str, environ: dict[str, str]) -> Reply:
    _append(state / "rejections.jsonl", {"argv": argv, "why": why, "output": output})
    end_group = environ.get("FAKE_GCLOUD_KILL_GROUP") == "1"
    return Reply(2, stderr=output if output.endswith("\n") else output + "\n", end_group=end_group)


def _lacks_credential(argv: list[str], verdict: Verdict, environ: dict[str, str]) -> bool:
    """What the deployer lacks here: the real CLI stopped at that very credential."""
    missing = environ.get("FAKE_GCLOUD_CREDENTIALS", "")
    adc = argv[:2] == ["auth", "application-default"]
    return verdict.needs_credential and (missing == "none" or (missing == "no-adc" and adc))


def answer(argv: list[str], cwd: Path, environ: dict[str, str]) -> Reply:
    """One `gcloud argv` run in cwd with environ, as the project would answer it."""
    state = Path(environ["FAKE_GCLOUD_STATE"])
    socket_path = environ["FAKE_GCLOUD_SOCKET"]
    _append(state / "calls.jsonl", {"argv": argv, "cwd": str(cwd)})
    verdict = judge(socket_path, argv, str(cwd), environ)
    if not verdict.accepted:
        return _reject(state, argv, "rejected by the real gcloud", verdict.output, environ)
    if verdict.ran_offline:
        return Reply(0, stdout=verdict.output)
    if _lacks_credential(argv, verdict, environ):
        return Reply(1, stderr=verdict.output)
    project_id = environ.get("CLOUDSDK_CORE_PROJECT", "")
    number = environ.get("FAKE_GCLOUD_PROJECT_NUMBER", "123456789012")
    project = Project(state / "state.json", project_id, number, partial(render, socket_path))
    try:
        result = project.answer(argv, cwd)
    except Exception as exc:  # a defect of this fake must end the deploy too, visibly
        why = f"fake gcloud: {type(exc).__name__}: {exc}"
        return _reject(state, argv, "fake_project failed", why, environ)
    if result is None:
        why = "fake gcloud: no answer for this command"
        return _reject(state, argv, "no answer in fake_project", why, environ)
    code, out, err = result
    if code == 0:
        project.save()
    return Reply(code, out, err)


class _Call(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        argv, cwd, environ = marshal.loads(self.rfile.read())  # the stub's, until it shuts writing
        try:
            reply = answer(argv, Path(cwd), environ)
        except Exception as exc:  # the server itself failed: the deploy must not read it as "absent"
            reply = Reply(2, stderr=f"fake gcloud server: {type(exc).__name__}: {exc}\n", end_group=True)
        self.wfile.write(marshal.dumps(tuple(reply)))


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@cache
def serving() -> str:
    """The socket of this process's fake gcloud server, started on first use (a daemon thread:
    it ends with the test process). Every sandbox's stub calls it; the call's environment says
    which sandbox."""
    folder = tempfile.mkdtemp(prefix="fake-gcloud-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = str(Path(folder) / "gcloud.sock")
    server = _Server(path, _Call)
    threading.Thread(target=server.serve_forever, name="fake-gcloud", daemon=True).start()
    return path
