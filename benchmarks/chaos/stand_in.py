"""tests/harness/chaos_stand_in.py in a process of its own, as CHART-IMG is, controlled over
its admin port (which answers while the chart port refuses connections)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib import request

from e2e.multi_instance import StandInAccount, StandInProcess
from harness.builders import REPO
from harness.firestore_emulator import free_port

CHAOS_STAND_IN = REPO / "tests" / "harness" / "chaos_stand_in.py"


class ChaosStandInProcess(StandInProcess):
    """serve_chaos_from_stdin, with its admin port chosen here."""

    def __init__(self, accounts: Sequence[StandInAccount], *, latency: float, templates_dir: Path) -> None:
        admin_port = free_port()
        super().__init__(
            accounts,
            latency=latency,
            templates_dir=templates_dir,
            script=CHAOS_STAND_IN,
            extra_args=[f"--admin-port={admin_port}"],
        )
        self.admin_url = f"http://127.0.0.1:{admin_port}"

    def control(self, action: str, **values: Any) -> None:
        """One chaos control (tests/harness/chaos_stand_in.apply_control)."""
        body = json.dumps({"action": action, **values}).encode()
        post = request.Request(self.admin_url + "/admin/chaos", data=body, method="POST")
        with request.urlopen(post, timeout=30) as reply:
            reply.read()

    def _get(self, path: str) -> Any:
        with request.urlopen(self.admin_url + path, timeout=30) as reply:
            return json.loads(reply.read())

    def requests(self) -> list[dict[str, Any]]:
        """The request log: account_id, arrived, wall, symbol, template, status, digest, chaos."""
        log: list[dict[str, Any]] = self._get("/admin/requests")
        return log

    def accounts(self) -> list[dict[str, Any]]:
        """Each key's units as the stand-in counts them: account_id, used, quota."""
        usage: list[dict[str, Any]] = self._get("/admin/accounts")
        return usage
