"""The installed Google Cloud CLI, loaded once and forked per request (run with gcloud's own Python).

A fresh `gcloud` process spends ~0.5-0.9 s importing itself; deploy.sh makes ~70 calls per run.
This server imports the CLI once (`gcloud_main.CreateCLI`, as `gcloud` itself does) and forks a
child per request, so each check is the real CLI's own code on a clean copy of that state:

- `{"op": "execute", "argv": [...], "cwd": "...", "env": {...}}`: the child runs
  `cli.Execute(argv)` (parsing, then the command until it needs a credential, which the empty
  configuration it runs with does not have) and answers `{"code": exit status, "output": text}`.
- `{"op": "render", "resources": [...], "format": "...", "flatten": [...], "filter": "..."}`:
  prints resources as `gcloud ... --filter --flatten --format` would (gcloud's own resource
  filter, flattener and printer); answers `{"output": text}`.
- `{"op": "message", "kind": "alert_policy" | "log_metric" | "dashboard", "text": "..."}`: reads
  a policy, metric or dashboard file as `--policy-from-file` / `--config-from-file` do; answers
  `{"unknown": [fields the API message does not have]}` (gcloud reads those files into the API
  message only after the credential step).
- `{"op": "uploaded", "dir": "..."}`: the files `gcloud builds submit` would upload from there.

Usage: python gcloud_fork_server.py SDK_LIB_DIR SOCKET_PATH  (prints "ready" once listening).
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import sys
import tempfile
from functools import partial
from typing import Any


def _load(sdk_lib: str) -> Any:
    sys.path[:0] = [sdk_lib, os.path.join(sdk_lib, "third_party")]
    from googlecloudsdk import gcloud_main

    return gcloud_main.CreateCLI([])


def _execute(cli: Any, request: dict[str, Any]) -> dict[str, Any]:
    os.chdir(request["cwd"])
    os.environ.update(request.get("env", {}))
    with tempfile.TemporaryFile() as captured:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            cli.Execute(request["argv"])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # what gcloud_main would report as a crash
            print(f"fork server: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        captured.seek(0)
        return {"code": code, "output": captured.read().decode("utf-8", "replace")}


def _render(request: dict[str, Any]) -> dict[str, Any]:
    from googlecloudsdk.calliope import display_taps
    from googlecloudsdk.core.resource import resource_filter, resource_lex, resource_printer
    from googlecloudsdk.core.util import peek_iterable

    resources: Any = list(request["resources"])
    if request.get("filter"):
        expression = resource_filter.Compile(request["filter"])
        resources = [r for r in resources if expression.Evaluate(r)]
    for key in request.get("flatten", []):  # as calliope.display._AddFlattenTap does
        flattened: list[Any] = []
        sliced = False
        for part in resource_lex.Lexer(key).Key():
            sliced = part is None
            if sliced:
                resources = list(peek_iterable.Tapper(resources, display_taps.Flattener(flattened)))
            else:
                flattened.append(part)
        if not sliced:
            resources = list(peek_iterable.Tapper(resources, display_taps.Flattener(flattened)))
    out = io.StringIO()
    fmt = request.get("format") or "yaml"
    if request.get("single") and not request.get("flatten"):  # a describe: one resource
        resource_printer.Print(resources[0], fmt, out=out, single=True)
    else:
        resource_printer.Print(resources, fmt, out=out)
    return {"output": out.getvalue()}


def _unknown_fields(message: Any, path: str = "") -> list[str]:
    """Dotted paths of every field (or enum value) the API message does not have."""
    from apitools.base.protorpclite import messages

    found = [f"{path}{name}" for name in message.all_unrecognized_fields()]
    for field in message.all_fields():
        values = message.get_assigned_value(field.name)
        for index, value in enumerate(values if field.repeated else [values]):
            where = f"{path}{field.name}" + (f"[{index}]" if field.repeated else "")
            if isinstance(value, messages.Message):
                found += _unknown_fields(value, where + ".")
    return found


def _dashboard(text: str) -> Any:
    """As `monitoring dashboards create/update --config-from-file` read it: the file through
    the command's processor (yaml.load) into the request's `dashboard` field."""
    from googlecloudsdk.api_lib.util import apis
    from googlecloudsdk.command_lib.util.apis import arg_utils
    from googlecloudsdk.core import yaml

    request = apis.GetMessagesModule("monitoring", "v1").MonitoringProjectsDashboardsCreateRequest()
    arg_utils.SetFieldInMessage(request, "dashboard", yaml.load(text))
    return request.dashboard


def _message(request: dict[str, Any]) -> dict[str, Any]:
    """A --policy-from-file / --config-from-file text read as those commands read it."""
    if request["kind"] == "alert_policy":  # alpha monitoring policies create/update
        from googlecloudsdk.api_lib.util import apis
        from googlecloudsdk.command_lib.monitoring import util

        policy_class = apis.GetMessagesModule("monitoring", "v3").AlertPolicy
        message = util.MessageFromString(request["text"], policy_class, "AlertPolicy")
    elif request["kind"] == "dashboard":
        message = _dashboard(request["text"])
    else:  # logging metrics create/update
        from googlecloudsdk.api_lib.logging import util

        message = util.CreateLogMetric("metric", data=request["text"])
    return {"unknown": _unknown_fields(message)}


def _uploaded(request: dict[str, Any]) -> dict[str, Any]:
    """The files `gcloud builds submit` would upload from a folder (its .gcloudignore applied)."""
    from googlecloudsdk.command_lib.util import gcloudignore

    chooser = gcloudignore.GetFileChooserForDir(request["dir"], write_on_disk=False)
    return {"files": sorted(chooser.GetIncludedFiles(request["dir"], include_dirs=False))}


def _load_command(cli: Any, argv: list[str]) -> None:
    """Load the command argv names (its modules, its parser) into this process, as the CLI
    itself does on the way to running it: the children forked after this find it loaded,
    instead of each importing it again (0.3-0.6 s for `run` or `storage` commands). Loading
    builds what the CLI would build anyway; a word that names no command ends the walk, and
    the child meets it (or a load error) just as a fresh `gcloud` would."""
    element = cli._TopElement()
    for word in argv:
        if word.startswith("-") or not element.is_group:
            return
        try:
            element = element.LoadSubElement(word)
        except Exception:  # the child loads it again and reports what gcloud reports
            return
        if element is None:
            return


def _answer(cli: Any, request: dict[str, Any]) -> dict[str, Any]:
    try:
        ops = {"execute": partial(_execute, cli), "render": _render, "message": _message}
        return {**ops, "uploaded": _uploaded}[request["op"]](request)
    except Exception as exc:  # told to the caller, who fails with it
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    sdk_lib, path = sys.argv[1], sys.argv[2]
    cli = _load(sdk_lib)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        with connection, connection.makefile("rwb") as stream:
            request = json.loads(stream.readline())
            if request.get("op") == "execute":
                _load_command(cli, request["argv"])
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the CLI may wait on its own children
                try:
                    stream.write(json.dumps(_answer(cli, request)).encode() + b"\n")
                    stream.flush()
                finally:
                    os._exit(0)


if __name__ == "__main__":
    main()
