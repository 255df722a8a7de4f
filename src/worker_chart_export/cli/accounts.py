"""`worker-chart-export accounts --check-file FILE`: is this CHART-IMG accounts file usable?

The same parser the worker applies to CHART_IMG_ACCOUNTS_JSON (adapters/accounts_config), so a
file that passes here is one every instance will accept; deploy.sh runs it on ACCOUNTS_FILE
before anything is uploaded. One line either way: the account ids (never a key), or the
problem naming the item and field. The file is named as `ACCOUNTS_FILE <path>`, the variable
deploy.sh reads it from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from worker_chart_export.adapters.accounts_config import parse_accounts
from worker_chart_export.core.exceptions import ConfigError

EXIT_OK, EXIT_USAGE = 0, 2
SETTING = "ACCOUNTS_FILE"


def add_accounts_command(commands: Any) -> None:
    accounts = commands.add_parser("accounts", help="CHART-IMG accounts: check an accounts file")
    accounts.add_argument(
        "--check-file",
        type=Path,
        metavar="FILE",
        help="parse FILE as CHART_IMG_ACCOUNTS_JSON would be; print its account ids, exit 0, "
        "or name the problem, exit 2",
    )
    accounts.set_defaults(accounts_usage=accounts.format_usage())


def run_accounts(args: argparse.Namespace) -> int:
    if args.check_file is None:
        print(args.accounts_usage, end="", file=sys.stderr)
        print("worker-chart-export accounts: error: give --check-file FILE", file=sys.stderr)
        return EXIT_USAGE
    try:
        ids = check_accounts_file(args.check_file)
    except ConfigError as exc:
        print(f"worker-chart-export: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{SETTING} {args.check_file}: {len(ids)} account(s): {', '.join(ids)}")
    return EXIT_OK


def check_accounts_file(path: Path) -> list[str]:
    """The account ids of a valid file; ConfigError (`ACCOUNTS_FILE <path>: <problem>`) else."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(SETTING, "is not UTF-8 text", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot be read ({exc.strerror or exc})", source=str(path)) from None
    return [account.id for account in parse_accounts(text, setting=SETTING, source=str(path))]
