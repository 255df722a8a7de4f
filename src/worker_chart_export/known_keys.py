"""The API keys (and TradingView sessions) this process holds, as the one `Redaction` every
exit applies.

A key becomes known where the process is handed it: `adapters/chart_img/accounts_config.parse_accounts`
(CHART_IMG_ACCOUNTS_JSON, --accounts-config-path, Secret Manager, `accounts --check-file`) and
the `AccountLimiter` that sends it; a session's two values where
`adapters/chart_img/sessions_config.parse_sessions` reads them (CHART_IMG_SESSIONS_JSON,
--sessions-config-path, Secret Manager): a session is redacted exactly as a key is. From then
on every exit redacts it in every form
(core/redaction.py): log lines (logs.py), CHART-IMG's words as they arrive
(adapters/chart_img/http.py), the reasons the usage stores record, a step's error and the
manifest's failures, the CLI's output (the served process's streams too), the served
process's HTTP answers (functions/serve.py) and the view page. Keys are only ever added: a key
once held stays redacted for the life of the process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from worker_chart_export.core.redaction import NO_SECRETS, Redaction

_lock = threading.Lock()
_current: Redaction = NO_SECRETS


def learn(keys: Iterable[str]) -> None:
    """From now on, `keys` are redacted too (compiled again only when one is new)."""
    global _current
    new = frozenset(keys)
    with _lock:
        if not new <= _current.keys:
            _current = Redaction(_current.keys | new)


def redaction() -> Redaction:
    """The keys known so far (a value: read without a lock)."""
    return _current


def forget_all() -> None:
    """Tests only: each test starts knowing no key."""
    global _current
    with _lock:
        _current = NO_SECRETS
