"""The wire to the judge (gcloud_fork_server.py): the requests and its verdict, and nothing
heavier than `json` and `socket` to import.

Every gcloud call deploy.sh makes in a sandbox starts the fake gcloud (fake_gcloud.py) in a
process of its own, ~80 per deploy, and each imports this module: the judge itself and how it
is started live in gcloud_cli.py.
"""

from __future__ import annotations

import json
import socket
from typing import Any, NamedTuple

NEEDS_CREDENTIAL = "You do not currently have an active account selected"
NEEDS_ADC = "Your default credentials were not found"
# What a call may carry to the CLI: the properties deploy.sh sets (project, prompts). Never an
# account, a token or another configuration directory.
_PASSED_ON = ("CLOUDSDK_CORE_PROJECT", "CLOUDSDK_CORE_DISABLE_PROMPTS")


class Verdict(NamedTuple):
    code: int
    output: str

    @property
    def needs_credential(self) -> bool:
        """gcloud parsed the call and stopped where it needs a login or the ADC it lacks."""
        return NEEDS_CREDENTIAL in self.output or NEEDS_ADC in self.output

    @property
    def accepted(self) -> bool:
        """gcloud took the call: it ran to the credential step, or ran without needing one."""
        return self.needs_credential or self.code == 0

    @property
    def ran_offline(self) -> bool:
        return self.code == 0 and not self.needs_credential


def passed_on(env: dict[str, str]) -> dict[str, str]:
    return {k: env[k] for k in _PASSED_ON if k in env}


def ask(socket_path: str, request: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(socket_path)
        with connection.makefile("rwb") as stream:
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            answer: dict[str, Any] = json.loads(stream.readline())
    if "error" in answer:
        raise RuntimeError(f"gcloud fork server: {answer['error']}")
    return answer


def judge(socket_path: str, argv: list[str], cwd: str, env: dict[str, str]) -> Verdict:
    """The real CLI's verdict on `gcloud argv`, run in cwd with env's gcloud properties."""
    answer = ask(socket_path, {"op": "execute", "argv": argv, "cwd": cwd, "env": passed_on(env)})
    return Verdict(answer["code"], answer["output"])


def render(
    socket_path: str,
    resources: list[Any],
    fmt: str | None,
    *,
    flatten: list[str] | None = None,
    filter_expression: str | None = None,
    single: bool = False,
) -> str:
    """What `gcloud ... --filter --flatten --format` prints for these API resources."""
    request = {
        "op": "render",
        "resources": resources,
        "format": fmt,
        "flatten": flatten or [],
        "filter": filter_expression,
        "single": single,
    }
    output: str = ask(socket_path, request)["output"]
    return output


def unknown_fields(socket_path: str, kind: str, text: str) -> list[str]:
    """Fields of a policy (`alert_policy`), metric (`log_metric`) or dashboard (`dashboard`)
    file the API does not have, read with the code `--policy-from-file` / `--config-from-file`
    use."""
    found: list[str] = ask(socket_path, {"op": "message", "kind": kind, "text": text})["unknown"]
    return found


def uploaded_files(socket_path: str, directory: str) -> list[str]:
    """What `gcloud builds submit` would upload from directory, by gcloud's own .gcloudignore rules."""
    found: list[str] = ask(socket_path, {"op": "uploaded", "dir": directory})["files"]
    return found
