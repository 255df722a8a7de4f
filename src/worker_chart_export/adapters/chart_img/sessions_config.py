"""TradingView sessions: what reaches a private layout or invite-only indicators through
CHART-IMG's Shared Layout endpoint (the `tradingview-session-id` and
`tradingview-session-id-sign` headers: a browser's `sessionid` and `sessionid_sign` cookies).

`[{"id", "sessionId", "sessionIdSign"}]` from CHART_IMG_SESSIONS_JSON (run-local's
--sessions-config-path lands there too), else from the Secret Manager version
CHART_IMG_SESSIONS_SECRET; none configured is no session at all. A session is a secret as a
key is: a SecretStr from parsing on, known to the process's redaction (known_keys) once
parsed, never in a problem, a log line, a digest or a document. Its `id` is a name: a layout
template names the session it needs by it (`layout.session`), and so does an account
(`session` in the accounts JSON) whose own session its layout charts use.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, SecretStr, field_validator

from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.accounts_config import (
    AccountConfig,
    NamedItem,
    SecretClient,
    load_listed,
    parse_items,
)
from worker_chart_export.core.exceptions import ConfigError

JSON_SOURCE = "CHART_IMG_SESSIONS_JSON"
SECRET_SOURCE = "CHART_IMG_SESSIONS_SECRET"


class SessionConfig(NamedItem):
    """One TradingView session: its name (`id`) and the two cookie values CHART-IMG sends on."""

    session_id: SecretStr = Field(alias="sessionId")
    session_id_sign: SecretStr = Field(alias="sessionIdSign")

    @field_validator("session_id", "session_id_sign")
    @classmethod
    def _header_safe(cls, value: SecretStr) -> SecretStr:
        secret = value.get_secret_value()
        if not secret or not all("!" <= ch <= "~" for ch in secret):
            # the message must not echo the session: say what is wrong, not what it is
            raise ValueError("must be a non-empty string of printable ASCII without spaces")
        return value

    def secrets(self) -> tuple[str, str]:
        return self.session_id.get_secret_value(), self.session_id_sign.get_secret_value()


def parse_sessions(
    text: str, *, setting: str = JSON_SOURCE, source: str | None = None
) -> tuple[SessionConfig, ...]:
    """The validated session list (may be empty), or ConfigError naming each problem, never
    a session's value."""
    sessions = parse_items(text, SessionConfig, setting=setting, source=source, what="session")
    known_keys.learn(secret for session in sessions for secret in session.secrets())
    return sessions


def load_sessions(
    sessions_json: SecretStr | None,
    sessions_secret: str | None,
    project: str | None,
    *,
    secret_client: SecretClient | None = None,
) -> tuple[SessionConfig, ...]:
    """The JSON first; the secret only when the JSON is absent; else ()."""
    return load_listed(
        sessions_json, sessions_secret, project, parse_sessions, (JSON_SOURCE, SECRET_SOURCE), secret_client
    )


def check_account_sessions(
    accounts: Sequence[AccountConfig], sessions: Sequence[SessionConfig], *, accounts_setting: str
) -> None:
    """Each account's `session` is a configured session; else ConfigError naming the accounts
    and the sessions there are (not the unknown name: a session's value pasted there would
    be printed)."""
    configured = {session.id for session in sessions}
    unknown = [a.id for a in accounts if a.session is not None and a.session not in configured]
    if unknown:
        named = "; ".join(f"account '{a}' names a session" for a in unknown)
        there = ", ".join(sorted(configured)) or f"none: set {JSON_SOURCE} or {SECRET_SOURCE}"
        raise ConfigError(accounts_setting, f"{named}, which is not configured (sessions: {there})")
