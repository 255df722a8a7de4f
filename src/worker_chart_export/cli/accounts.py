"""`worker-chart-export accounts`: what each CHART-IMG account has left today; and
`accounts --check-file FILE`: is this accounts file usable?

Without `--check-file`: one row per account (its id, never its key): plan, daily limit, used
and left today, the next send slot, cooling, exhausted or disabled and why, then the totals
and the day's remaining capacity. The usage comes from Firestore
(`chart_img_accounts_usage/`, the emulator's with FIRESTORE_EMULATOR_HOST), or with `--local`
from run-local's usage file under `--output-dir`. The accounts come from the worker's own
sources (`--accounts-config-path`, CHART_IMG_ACCOUNTS_JSON, CHART_IMG_ACCOUNTS_SECRET);
without any, every usage document found is listed, plan unknown. The rows are
`core.chart_img.account_status`'s; this module reads, then prints a table or `--json`.

`--check-file FILE`: the same parser the worker applies to CHART_IMG_ACCOUNTS_JSON
(adapters/chart_img/accounts_config), so a file that passes here is one every instance will accept;
deploy.sh runs it on ACCOUNTS_FILE before anything is uploaded. One line either way: the
account ids, or the problem naming the item and field, the file named as this command sees
it, `accounts file <path>` (deploy.sh puts its own variable's name in front).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker_chart_export import SERVICE_NAME
from worker_chart_export.cli.accounts_table import render_table
from worker_chart_export.command_surface import EXIT_OK, USAGE_MEANING, add_command
from worker_chart_export.core.chart_img.account_status import quota_report, report_dict
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.exceptions import ConfigError, UsageError
from worker_chart_export.core.naming import ACCOUNTS_USAGE_COLLECTION
from worker_chart_export.environment import CHART_IMG_ACCOUNTS_JSON
from worker_chart_export.logs import configure_logging
from worker_chart_export.settings import Settings, load_settings

# how --check-file's lines name the file it was given
SETTING = "accounts file"
_CONFIG_FLAG = "--accounts-config-path"


def add_accounts_command(commands: Any) -> None:
    accounts = add_command(
        commands,
        "accounts",
        summary="what each CHART-IMG account has left today, or check an accounts file",
        description=(
            "One row per CHART-IMG account (its id, never its key): plan, daily limit, used and left\n"
            "today, the next send slot, whether it is paced, cooling down, exhausted or disabled and why,\n"
            "then the totals. The usage comes from Firestore chart_img_accounts_usage/ (the emulator's\n"
            "with FIRESTORE_EMULATOR_HOST), or with --local from run-local's usage file. The accounts\n"
            "come from where the worker takes them: --accounts-config-path, else CHART_IMG_ACCOUNTS_JSON,\n"
            "else CHART_IMG_ACCOUNTS_SECRET; without any, the usage documents alone are shown.\n"
            "--check-file FILE only checks an accounts file, as deploy.sh does before uploading it."
        ),
        exit_codes={0: "shown (or, with --check-file, the file is usable)", 2: USAGE_MEANING},
        run=run_accounts,
    )
    accounts.add_argument(
        "--check-file",
        type=Path,
        metavar="FILE",
        help="only check FILE, as CHART_IMG_ACCOUNTS_JSON would be parsed: its account ids, exit 0, "
        "or the problem, exit 2 (takes no other flag; default: show the accounts)",
    )
    accounts.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    accounts.add_argument(
        _CONFIG_FLAG,
        type=Path,
        metavar="FILE",
        help="the accounts, as CHART_IMG_ACCOUNTS_JSON (over it and CHART_IMG_ACCOUNTS_SECRET; "
        "default: neither set, the usage documents alone)",
    )
    accounts.add_argument(
        "--local", action="store_true", help="read run-local's usage file instead of Firestore"
    )
    accounts.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="run-local's output folder (implies --local; over env CHARTS_LOCAL_OUTPUT_DIR; default ./out)",
    )


def run_accounts(args: argparse.Namespace) -> int:
    if args.check_file is not None:
        return _check(args)
    settings = load_settings(
        {
            "chart_img_accounts_json": read_accounts_file(args.accounts_config_path),
            "local_output_dir": args.output_dir,
        }
    )
    configure_logging(service=SERVICE_NAME, env=settings.env, stream=sys.stderr)
    from worker_chart_export.bootstrap import configured_accounts

    try:
        accounts = configured_accounts(settings)
    except ConfigError as exc:  # name the file when the flag gave the accounts
        path = args.accounts_config_path
        label = f"{_CONFIG_FLAG} {path}" if path and exc.setting == CHART_IMG_ACCOUNTS_JSON else None
        raise UsageError(exc.render(label)) from None
    local = args.local or args.output_dir is not None
    source, docs = _local_usage(settings) if local else _firestore_usage(settings)
    report = quota_report(accounts, docs, SYSTEM_CLOCK.now())
    if args.json:
        print(json.dumps({"source": source, **report_dict(report)}, indent=2))
    else:
        print(render_table(report, source, configured=bool(accounts)))
    return EXIT_OK


def _firestore_usage(settings: Settings) -> tuple[str, Mapping[str, Mapping[str, Any]]]:
    from worker_chart_export.bootstrap import cli_runtime

    with cli_runtime(settings) as runtime:
        client = runtime.firestore_client()
        docs = runtime.usage_documents()
    host = settings.firestore_emulator_host
    where = f"Firestore emulator at {host}" if host else f"Firestore of {client.project}"
    return f"{where}, {ACCOUNTS_USAGE_COLLECTION}/", docs


def _local_usage(settings: Settings) -> tuple[str, Mapping[str, Mapping[str, Any]]]:
    from worker_chart_export.bootstrap import LocalLayout
    from worker_chart_export.bootstrap.commands import local_usage_documents

    if settings.local_output_dir.exists() and not settings.local_output_dir.is_dir():
        raise UsageError(f"run-local's output folder {settings.local_output_dir} is not a folder")
    path = LocalLayout.usage_file_in(settings.local_output_dir)
    try:
        docs = local_usage_documents(path)
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise UsageError(f"run-local's usage file {path} is unreadable ({exc})") from None
    written = "" if path.exists() else " (not written yet: run-local writes it in real or record mode)"
    return f"run-local's usage file {path}{written}", docs


def read_accounts_file(path: Path | None) -> str | None:
    """The text of an --accounts-config-path file (None: no flag); one line when unreadable."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{_CONFIG_FLAG} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{_CONFIG_FLAG} {path}: not UTF-8 text") from None


def _check(args: argparse.Namespace) -> int:
    others = [
        flag
        for flag, given in (
            ("--json", args.json),
            (_CONFIG_FLAG, args.accounts_config_path is not None),
            ("--local", args.local),
            ("--output-dir", args.output_dir is not None),
        )
        if given
    ]
    if others:
        raise UsageError(f"--check-file takes no other flag (got {', '.join(others)})")
    try:
        ids = check_accounts_file(args.check_file)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    print(f"{SETTING} {args.check_file}: {len(ids)} account(s): {', '.join(ids)}")
    return EXIT_OK


def check_accounts_file(path: Path) -> list[str]:
    """The account ids of a valid file; ConfigError (`accounts file <path>: <problem>`) else."""
    from worker_chart_export.bootstrap.commands import parse_accounts

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(SETTING, "is not UTF-8 text", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot be read ({exc.strerror or exc})", source=str(path)) from None
    return [account.id for account in parse_accounts(text, setting=SETTING, source=str(path))]
