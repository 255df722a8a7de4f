"""Account config parsing and loading (contract §11.1); the limiter: test_limiter.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import SecretStr

from harness.chart_img_server import new_key
from harness.secret_scan import leaks
from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.accounts_config import (
    load_accounts,
    parse_accounts,
    secret_version_name,
)
from worker_chart_export.core.exceptions import ConfigError

KEY = new_key()


def test_parses_accounts_and_hides_keys() -> None:
    text = json.dumps(
        [
            {"id": "acc1", "apiKey": KEY, "dailyLimit": 44, "ratePerSecond": 10, "burst": 15},
            {"id": "acc.2_b-c", "apiKey": KEY + "x"},
        ]
    )
    accounts = parse_accounts(text)
    assert [a.id for a in accounts] == ["acc1", "acc.2_b-c"]
    assert accounts[0].api_key.get_secret_value() == KEY
    assert (accounts[0].daily_limit, accounts[0].rate_per_second, accounts[0].burst) == (44, 10.0, 15)
    assert accounts[1].daily_limit is None
    assert KEY not in repr(accounts) and KEY not in str(accounts)


MALFORMED = [
    ([{"id": "acc1", "apiKey": KEY}, {"id": "acc2"}], "CHART_IMG_ACCOUNTS_JSON: item 2: missing 'apiKey'"),
    ('[{"id": "acc1", "apiKey": "' + KEY + '"', "not valid JSON at line 1 column"),
    ("[{'id': 'acc1'}]", "not valid JSON at line 1 column 3"),
    ([{"id": "acc1", "apiKey": KEY}, {"id": "acc1", "apiKey": KEY}], "duplicate account id 'acc1'"),
    ([], "empty list"),
    ({"id": "acc1", "apiKey": KEY}, "expected a JSON array"),
    ([{"id": "bad id!", "apiKey": KEY}], "id must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"),
    ([{"id": "acc1", "apiKey": KEY, "apikey": KEY}], "item 1: field 3 is unknown (its name is not shown"),
    ([{"id": "acc1", "apiKey": ""}], "item 1: 'apiKey' must be a non-empty string"),
    ([{"id": "acc1", "apiKey": KEY + " \n"}], "'apiKey' must be a non-empty string of printable"),
    ([{"id": "acc1", "apiKey": 12345678901234}], "item 1: 'apiKey'"),
    ([{"id": "acc1", "apiKey": KEY, "dailyLimit": 0}], "'dailyLimit' must be at least 1"),
    ([{"id": "acc1", "apiKey": KEY, "dailyLimit": "44"}], "'dailyLimit' must be a whole number"),
    ([{"id": "acc1", "apiKey": KEY, "ratePerSecond": -1}], "'ratePerSecond'"),
    (["acc1"], "item 1: expected an object, got string"),
]


# ids of their own: a case's default id would quote KEY, drawn anew by each session (mutmut
# finds the tests of a mutant by their ids, kept from one run to the next)
@pytest.mark.parametrize(("config", "expected"), MALFORMED, ids=[f"case{i}" for i, _ in enumerate(MALFORMED)])
def test_malformed_config_names_the_problem_never_the_key(config: Any, expected: str) -> None:
    text = config if isinstance(config, str) else json.dumps(config)
    with pytest.raises(ConfigError) as caught:
        parse_accounts(text)
    message = str(caught.value)
    assert expected in message
    assert KEY not in message
    assert text not in message


def test_a_key_typed_as_a_field_name_is_named_by_its_position() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY}, {"id": "acc2", KEY: "x", "plan": "PRO"}]))
    message = str(caught.value)
    assert message == (
        "CHART_IMG_ACCOUNTS_JSON: item 2: missing 'apiKey'; item 2: field 2 is unknown (its name is not "
        "shown; known: id, apiKey, dailyLimit, ratePerSecond, burst, plan, session)"
    )
    assert not leaks([message], [KEY])


def test_a_duplicate_id_is_named_unless_it_is_a_key() -> None:
    long_id = "account-number-one"
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": long_id, "apiKey": KEY}, {"id": long_id, "apiKey": KEY + "2"}]))
    assert str(caught.value) == f"CHART_IMG_ACCOUNTS_JSON: duplicate account id '{long_id}'"
    key_as_id = "abcdefgh0123456789"
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": key_as_id, "apiKey": key_as_id}] * 2))
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_JSON: duplicate account id '<redacted>'"


def test_a_value_that_could_be_a_key_is_redacted_in_any_form() -> None:
    with pytest.raises(ConfigError) as caught:  # the plan's message names the value it refuses
        parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY, "plan": KEY[:20]}]))
    assert "unknown CHART-IMG plan '<redacted>'" in str(caught.value)
    assert not leaks([str(caught.value)], [KEY])


def test_parsed_keys_become_known_to_the_process() -> None:
    assert KEY not in known_keys.redaction().keys
    parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY}]))
    assert known_keys.redaction().text(f"echo {KEY}") == "echo <redacted>"


def test_a_key_that_lands_in_an_id_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": KEY + "/oops", "apiKey": KEY}]))
    assert KEY not in str(caught.value)


class FakeSecrets:
    def __init__(self, payload: str | bytes | None = None, error: Exception | None = None) -> None:
        self.payload, self.error, self.names = payload, error, []

    def access_secret_version(self, *, name: str) -> Any:
        self.names.append(name)
        if self.error:
            raise self.error
        data = self.payload if isinstance(self.payload, bytes) else (self.payload or "").encode()
        return SimpleNamespace(payload=SimpleNamespace(data=data))


def test_env_json_wins_over_the_secret() -> None:
    secrets = FakeSecrets(json.dumps([{"id": "from-secret", "apiKey": KEY}]))
    accounts_json = SecretStr(json.dumps([{"id": "from-env", "apiKey": KEY}]))
    secret = "projects/p/secrets/chart-img-accounts/versions/3"
    assert [a.id for a in load_accounts(accounts_json, secret, None, secret_client=secrets)] == ["from-env"]
    assert secrets.names == []


def test_secret_read_when_json_absent() -> None:
    secrets = FakeSecrets(json.dumps([{"id": "from-secret", "apiKey": KEY}]))
    loaded = load_accounts(None, "chart-img-accounts", "proj", secret_client=secrets)
    assert [a.id for a in loaded] == ["from-secret"]
    assert secrets.names == ["projects/proj/secrets/chart-img-accounts/versions/latest"]


def test_nothing_configured_gives_no_accounts() -> None:
    assert load_accounts(None, None, None, secret_client=FakeSecrets()) == ()


def test_unreadable_secret_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_accounts(
            None, "projects/p/secrets/s", None, secret_client=FakeSecrets(error=PermissionError("denied"))
        )
    assert str(caught.value) == (
        "CHART_IMG_ACCOUNTS_SECRET: cannot read projects/p/secrets/s/versions/latest: PermissionError"
    )


def test_a_secret_that_is_no_utf8_text_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_accounts(None, "projects/p/secrets/s/versions/2", None, secret_client=FakeSecrets(b"\xff\xfe[]"))
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_SECRET: projects/p/secrets/s/versions/2 is not UTF-8 text"


def test_without_a_client_secret_managers_own_is_made_and_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud import secretmanager

    made: list[FakeSecrets] = []

    def client() -> FakeSecrets:
        made.append(FakeSecrets(json.dumps([{"id": "from-secret", "apiKey": KEY}])))
        return made[-1]

    monkeypatch.setattr(secretmanager, "SecretManagerServiceClient", client)
    assert [a.id for a in load_accounts(None, "s", "proj")] == ["from-secret"]
    assert [m.names for m in made] == [["projects/proj/secrets/s/versions/latest"]]


def test_malformed_secret_names_its_source() -> None:
    with pytest.raises(ConfigError) as caught:
        load_accounts(
            None,
            "projects/p/secrets/s/versions/1",
            None,
            secret_client=FakeSecrets(json.dumps([{"id": "a"}])),
        )
    assert "CHART_IMG_ACCOUNTS_SECRET projects/p/secrets/s/versions/1: item 1: missing 'apiKey'" in str(
        caught.value
    )


def test_bare_secret_id_needs_a_project() -> None:
    with pytest.raises(ConfigError) as caught:
        secret_version_name("chart-img-accounts", None)
    assert str(caught.value) == (
        "CHART_IMG_ACCOUNTS_SECRET: 'chart-img-accounts' is not a full resource name "
        "(projects/<p>/secrets/<s>/versions/<v>) and GOOGLE_CLOUD_PROJECT is not set"
    )


@pytest.mark.parametrize(
    ("secret", "project", "name"),
    [
        ("projects/p/secrets/s/versions/4", None, "projects/p/secrets/s/versions/4"),
        ("projects/p/secrets/s", "other", "projects/p/secrets/s/versions/latest"),
        ("s", "proj", "projects/proj/secrets/s/versions/latest"),
        ("s", "", None),
    ],
    ids=["version", "secret", "bare-id", "bare-id-no-project"],
)
def test_a_secret_is_named_as_a_version_of_it(secret: str, project: str | None, name: str | None) -> None:
    if name is None:
        with pytest.raises(ConfigError):
            secret_version_name(secret, project)
    else:
        assert secret_version_name(secret, project) == name


def test_each_json_type_that_is_no_account_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([[], "acc1", True, None, 7, 2.5, {"id": "acc1", "apiKey": KEY}]))
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_JSON: " + "; ".join(
        f"item {i}: expected an object, got {kind}"
        for i, kind in enumerate(["array", "string", "boolean", "null", "number", "number"], start=1)
    )
    with pytest.raises(ConfigError) as caught:
        parse_accounts("null")
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_JSON: expected a JSON array of accounts, got null"


def test_an_id_that_is_no_string_is_named_as_such_not_as_a_pattern_mismatch() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": 123, "apiKey": KEY}]))
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_JSON: item 1: 'id' must be a string"


def test_a_value_exactly_as_long_as_a_key_can_be_is_redacted() -> None:
    from worker_chart_export.core.redaction import MIN_RUN

    shortest = "k" * MIN_RUN  # a key this short is still a key
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY, "plan": shortest}]))
    assert "unknown CHART-IMG plan '<redacted>'" in str(caught.value) and shortest not in str(caught.value)


def test_a_field_given_by_its_python_name_with_a_bad_value_is_named_by_position_only() -> None:
    """`daily_limit` is accepted for `dailyLimit`, but a problem with it never prints a name
    that is not one of ours (it might be a key typed in the wrong place)."""
    with pytest.raises(ConfigError) as caught:
        parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY, "daily_limit": 0}]))
    assert str(caught.value) == (
        "CHART_IMG_ACCOUNTS_JSON: item 1: field 3 is unknown (its name is not shown; "
        "known: id, apiKey, dailyLimit, ratePerSecond, burst, plan, session)"
    )


def test_an_accounts_own_values_win_over_the_defaults() -> None:
    from worker_chart_export.core.chart_img.plans import AccountLimits

    (account,) = parse_accounts(
        json.dumps([{"id": "a", "apiKey": KEY, "dailyLimit": 9, "ratePerSecond": 2.5, "burst": 4}])
    )
    assert account.limits(AccountLimits(44, 1.0, 3)) == AccountLimits(9, 2.5, 4)


def test_an_empty_list_says_to_configure_an_account() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_accounts("[]")
    assert str(caught.value) == "CHART_IMG_ACCOUNTS_JSON: empty list: configure at least one account"


def test_required_accounts_read_a_bare_secret_id_in_the_project() -> None:
    from worker_chart_export.adapters.chart_img.accounts_config import require_accounts

    secrets = FakeSecrets(json.dumps([{"id": "from-secret", "apiKey": KEY}]))
    assert [a.id for a in require_accounts(None, "s", "proj", secret_client=secrets)] == ["from-secret"]
    assert secrets.names == ["projects/proj/secrets/s/versions/latest"]
