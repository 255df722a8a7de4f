"""TradingView sessions as configured secrets (adapters/chart_img/sessions_config.py): parsed
like the accounts, learnt for redaction, never echoed; each account's session among them."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr

from harness.chart_img_server import new_key
from harness.secret_scan import leaks
from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.accounts_config import parse_accounts
from worker_chart_export.adapters.chart_img.sessions_config import (
    check_account_sessions,
    load_sessions,
    parse_sessions,
)
from worker_chart_export.core.exceptions import ConfigError

from .test_accounts_config import FakeSecrets


def _session(name: str = "mine") -> tuple[dict[str, str], str, str]:
    sid, sign = new_key(), new_key()
    return {"id": name, "sessionId": sid, "sessionIdSign": sign}, sid, sign


def test_a_session_parses_hides_its_values_and_becomes_known_to_redaction() -> None:
    item, sid, sign = _session()
    assert sid not in known_keys.redaction().keys
    (session,) = parse_sessions(json.dumps([item]))
    assert session.id == "mine"
    assert session.secrets() == (sid, sign)
    assert not leaks([repr(session), str(session)], [sid, sign])
    assert known_keys.redaction().text(f"{sid} and {sign}") == "<redacted> and <redacted>"


def test_no_sessions_is_none_and_an_empty_list_is_allowed() -> None:
    assert load_sessions(None, None, None, secret_client=FakeSecrets()) == ()
    assert load_sessions(SecretStr("  "), None, None, secret_client=FakeSecrets()) == ()
    assert parse_sessions("[]") == ()


def test_a_bad_session_is_named_by_item_and_field_never_shown() -> None:
    item, sid, _ = _session()
    item["sessionIdSign"] = "has a space " + sid
    extra, other, _ = _session("two")
    extra[sid] = "typed as a field name"
    twin, twin_id, _ = _session("twin")
    with pytest.raises(ConfigError) as caught:
        parse_sessions(json.dumps([item, extra, twin, twin]))
    message = str(caught.value)
    assert message.startswith("CHART_IMG_SESSIONS_JSON: item 1: 'sessionIdSign' ")
    assert (
        "item 2: field 4 is unknown (its name is not shown; known: id, sessionId, sessionIdSign)" in message
    )
    assert "duplicate session id 'twin'" in message
    assert not leaks([message], [sid, other, twin_id])


def test_the_secret_is_read_only_without_the_json_and_named_in_its_problem() -> None:
    item, sid, _ = _session("from-secret")
    secrets = FakeSecrets(json.dumps([item]))
    loaded = load_sessions(None, "tv-sessions", "proj", secret_client=secrets)
    assert [s.id for s in loaded] == ["from-secret"]
    assert secrets.names == ["projects/proj/secrets/tv-sessions/versions/latest"]
    with pytest.raises(ConfigError) as caught:
        load_sessions(None, "projects/p/secrets/s/versions/4", None, secret_client=FakeSecrets("{}"))
    assert str(caught.value) == (
        "CHART_IMG_SESSIONS_SECRET projects/p/secrets/s/versions/4: expected a JSON array of "
        "sessions, got object"
    )
    assert sid not in str(caught.value)


def test_an_account_naming_a_session_not_configured_is_refused_by_names() -> None:
    item, _, _ = _session("mine")
    sessions = parse_sessions(json.dumps([item]))
    accounts = parse_accounts(
        json.dumps([{"id": "a1", "apiKey": new_key(), "session": "mine"}, {"id": "a2", "apiKey": new_key()}])
    )
    check_account_sessions(accounts, sessions, accounts_setting="CHART_IMG_ACCOUNTS_JSON")
    stray = parse_accounts(json.dumps([{"id": "a3", "apiKey": new_key(), "session": "gone"}]))
    with pytest.raises(ConfigError) as caught:
        check_account_sessions(stray, sessions, accounts_setting="CHART_IMG_ACCOUNTS_JSON")
    assert str(caught.value) == (
        "CHART_IMG_ACCOUNTS_JSON: account 'a3' names a session, which is not configured (sessions: mine)"
    )
    with pytest.raises(ConfigError, match="sessions: none: set CHART_IMG_SESSIONS_JSON"):
        check_account_sessions(stray, (), accounts_setting="CHART_IMG_ACCOUNTS_JSON")
