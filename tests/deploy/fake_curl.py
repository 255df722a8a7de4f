"""The `curl` deploy.sh finds first on PATH in tests/deploy/test_deploy_real_cli.py: the Firebase
Rules API as a live project answers it, judged by Google's own description of that API.

The judge is the API's discovery document (firebaserules.v1.json, revision 20241125, as
google-api-python-client 2.202.0 ships it in googleapiclient/discovery_cache/documents/): a
call must be one of its methods (HTTP method and path, the path's `name` matching the method's
pattern) with a body of the method's request schema: no field the schema lacks, none it marks
read-only. A call that is not, or one without the bearer token the fake gcloud gave
(fake_project.ACCESS_TOKEN) or the `x-goog-user-project` header, is written to
rejections.jsonl and ends the deploy (as a rejected gcloud call does). Every call goes to
rules_calls.jsonl (method, path, body, whether the token appeared on the command line).

Answers as curl prints them with deploy.sh's options (`--write-out '\\n%{http_code}'`): the JSON
body, a newline, the status. Rulesets and releases live in the fake project's state.json.
Only the options deploy.sh uses are understood; any other one is a rejection.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from fake_project import ACCESS_TOKEN

DISCOVERY = json.loads(Path(__file__).with_name("firebaserules.v1.json").read_text())
ROOT = DISCOVERY["rootUrl"]  # https://firebaserules.googleapis.com/


class Rejected(Exception):
    """Not a call the Firebase Rules API (or curl, as deploy.sh runs it) takes."""


def parse(argv: list[str], stdin: str) -> dict[str, Any]:
    call: dict[str, Any] = {"headers": {}, "body": None, "url": None, "write_out": None}
    flags = {"--silent", "--show-error"}
    args = iter(argv)
    for arg in args:
        if arg in flags:
            continue
        if arg == "--request":
            call["method"] = next(args)
        elif arg == "--write-out":
            call["write_out"] = next(args)
        elif arg == "--data-binary":
            call["body"] = next(args)
        elif arg == "--header":
            header = next(args)
            lines = stdin.splitlines() if header == "@-" else [header]
            for line in lines:
                name, _, value = line.partition(":")
                call["headers"][name.strip().lower()] = value.strip()
        elif arg.startswith("https://") and call["url"] is None:
            call["url"] = arg
        else:
            raise Rejected(f"curl option deploy.sh does not use: {arg}")
    if call["write_out"] != "\\n%{http_code}":
        raise Rejected("deploy.sh reads the status from --write-out '\\n%{http_code}'")
    return call


def method_for(http_method: str, url: str) -> tuple[str, dict[str, Any], str]:
    """(method id, its description, the `name` path parameter) the call is, by the discovery."""
    if not url.startswith(ROOT + "v1/"):
        raise Rejected(f"not the Firebase Rules API v1: {url}")
    path = url.removeprefix(ROOT + "v1/")
    for resource in DISCOVERY["resources"]["projects"]["resources"].values():
        for method in resource["methods"].values():
            suffix = method["path"].removeprefix("v1/{+name}")
            pattern = method["parameters"]["name"]["pattern"].removeprefix("^").removesuffix("$")
            found = re.fullmatch(f"({pattern}){re.escape(suffix)}", path)
            if found and method["httpMethod"] == http_method:
                return method["id"], method, found.group(1)
    raise Rejected(f"no method of the Firebase Rules API is {http_method} {path}")


def check_body(schema_name: str, value: Any, where: str = "") -> None:
    schema = DISCOVERY["schemas"][schema_name]
    if not isinstance(value, dict):
        raise Rejected(f"{where or 'the body'}: expected an object ({schema_name})")
    for field, item in value.items():
        spec = schema["properties"].get(field)
        if spec is None:
            raise Rejected(f"{where}{field}: {schema_name} has no such field")
        if spec.get("readOnly"):
            raise Rejected(f"{where}{field}: output only in {schema_name}")
        if "$ref" in spec:
            check_body(spec["$ref"], item, f"{where}{field}.")
        elif spec.get("type") == "array" and "$ref" in spec.get("items", {}):
            for index, element in enumerate(item):
                check_body(spec["items"]["$ref"], element, f"{where}{field}[{index}].")
        elif spec.get("type") == "string" and not isinstance(item, str):
            raise Rejected(f"{where}{field}: expected a string")


def error(code: int, status: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def answer(state: dict[str, Any], method_id: str, name: str, body: Any) -> tuple[int, dict[str, Any]]:
    rules = state.setdefault("rules", {"rulesets": {}, "releases": {}})
    project = name.split("/")[1]
    if method_id == "firebaserules.projects.rulesets.create":
        files = body.get("source", {}).get("files") or []
        if not files or not all(f.get("name") and f.get("content") for f in files):
            return error(400, "INVALID_ARGUMENT", "Ruleset source files must each have a name and content.")
        ruleset = {
            "name": f"projects/{project}/rulesets/{uuid.uuid4()}",
            "source": body["source"],
            "createTime": "2026-11-26T12:00:00.000000Z",
        }
        rules["rulesets"][ruleset["name"]] = ruleset
        return 200, ruleset
    if method_id == "firebaserules.projects.rulesets.get":
        found = rules["rulesets"].get(name)
        return (200, found) if found else error(404, "NOT_FOUND", "Requested entity was not found.")
    if method_id == "firebaserules.projects.releases.get":
        found = rules["releases"].get(name)
        return (200, found) if found else error(404, "NOT_FOUND", "Requested entity was not found.")
    if method_id in ("firebaserules.projects.releases.create", "firebaserules.projects.releases.patch"):
        release = body if method_id.endswith("create") else body.get("release", {})
        release_name = release.get("name", "")
        if method_id.endswith("patch") and release_name != name:
            return error(400, "INVALID_ARGUMENT", "The release name in the body must be the one in the path.")
        if release.get("rulesetName") not in rules["rulesets"]:
            return error(400, "INVALID_ARGUMENT", f"Ruleset {release.get('rulesetName')} does not exist.")
        exists = release_name in rules["releases"]
        if exists == method_id.endswith("create"):
            return (
                error(409, "ALREADY_EXISTS", release_name)
                if exists
                else error(404, "NOT_FOUND", release_name)
            )
        rules["releases"][release_name] = {
            "name": release_name,
            "rulesetName": release["rulesetName"],
            "createTime": "2026-11-26T12:00:00.000000Z",
            "updateTime": "2026-11-26T12:00:01.000000Z",
        }
        return 200, rules["releases"][release_name]
    raise Rejected(f"{method_id}: deploy.sh has no reason to call it")


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as log:
        log.write(json.dumps(record) + "\n")


def main(argv: list[str]) -> int:
    folder = Path(os.environ["FAKE_GCLOUD_STATE"])
    stdin = "" if sys.stdin.isatty() else sys.stdin.read()
    try:
        call = parse(argv, stdin)
        method_id, method, name = method_for(call.get("method", "GET"), call["url"] or "")
        body = None if call["body"] is None else json.loads(call["body"])
        if "request" in method:
            check_body(method["request"]["$ref"], body)
        elif body is not None:
            raise Rejected(f"{method_id} takes no body")
        headers = call["headers"]
        if headers.get("authorization") != f"Bearer {ACCESS_TOKEN}":
            raise Rejected("no Authorization header with the token gcloud auth print-access-token gave")
        if headers.get("x-goog-user-project") != name.split("/")[1]:
            raise Rejected("no x-goog-user-project header naming the project (user credentials need it)")
    except (Rejected, json.JSONDecodeError, StopIteration) as exc:
        _append(folder / "rejections.jsonl", {"argv": ["curl", *argv], "why": str(exc), "output": ""})
        print(f"fake curl: {exc}", file=sys.stderr)
        if os.environ.get("FAKE_GCLOUD_KILL_GROUP") == "1":
            os.killpg(os.getpgrp(), signal.SIGTERM)
        return 2
    state_file = folder / "state.json"
    state = (
        json.loads(state_file.read_text())
        if state_file.exists()
        else {"resources": {}, "iam": {}, "counter": 0}
    )
    status, payload = answer(state, method_id, name, body)
    state_file.write_text(json.dumps(state, indent=1, sort_keys=True))
    record = {"method": method_id, "name": name, "body": body, "status": status}
    _append(folder / "rules_calls.jsonl", {**record, "token_on_command_line": ACCESS_TOKEN in " ".join(argv)})
    sys.stdout.write(json.dumps(payload, indent=2) + f"\n{status}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
