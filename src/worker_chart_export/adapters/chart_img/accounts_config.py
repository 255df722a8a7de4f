"""CHART-IMG accounts: where their keys come from (worker contract §11.1).

`[{"id", "apiKey", "plan"?, "dailyLimit"?, "ratePerSecond"?, "burst"?, "session"?}]` from
CHART_IMG_ACCOUNTS_JSON (the CLI's --accounts-config-path lands there too), else from the
Secret Manager version CHART_IMG_ACCOUNTS_SECRET. A key never appears in an error message, a
repr or a log line: it is a SecretStr from parsing on, and known to the process's redaction
(known_keys) once parsed. A problem names an item and a field by position when the field is
not one of ours (a key typed as a field name is never printed), and any string of the input
that could be a key is redacted from the message (a duplicate id is named unless it is one).
`parse_items` is that parsing for any such list of secrets (TradingView sessions too:
sessions_config.py). `session` names the account's own TradingView session by its id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from worker_chart_export import known_keys
from worker_chart_export.core.chart_img.plans import AccountLimits, account_limits, plan_named
from worker_chart_export.core.exceptions import ConfigError
from worker_chart_export.core.problem_words import plain_problem
from worker_chart_export.core.redaction import MIN_RUN, Redaction

ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
JSON_SOURCE = "CHART_IMG_ACCOUNTS_JSON"
SECRET_SOURCE = "CHART_IMG_ACCOUNTS_SECRET"


class NamedItem(BaseModel):
    """An item of a configured list of secrets: its id, a name shown in logs and problems."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(pattern=ACCOUNT_ID_PATTERN)


class AccountConfig(NamedItem):
    api_key: SecretStr = Field(alias="apiKey")
    daily_limit: int | None = Field(default=None, alias="dailyLimit", ge=1, strict=True)
    rate_per_second: float | None = Field(default=None, alias="ratePerSecond", gt=0)
    burst: int | None = Field(default=None, ge=1, strict=True)
    # the CHART-IMG plan (BASIC, PRO, MEGA, ULTRA, ENTERPRISE): what this account's calls may
    # ask for (size, parameters, watermark; none declared: CHART_IMG_PLAN's), and its rate,
    # burst and daily limit become this account's defaults; explicit values above still win
    plan: str | None = None
    # the id of the account's own TradingView session (CHART_IMG_SESSIONS_JSON), sent with
    # its layout charts when the template names none; never the session itself
    session: str | None = Field(default=None, pattern=ACCOUNT_ID_PATTERN)

    @field_validator("plan")
    @classmethod
    def _known_plan(cls, value: str | None) -> str | None:
        return None if value is None else plan_named(value).name

    def limits(self, defaults: AccountLimits) -> AccountLimits:
        return account_limits(
            defaults,
            plan=self.plan,
            daily_limit=self.daily_limit,
            rate_per_second=self.rate_per_second,
            burst=self.burst,
        )

    @field_validator("api_key")
    @classmethod
    def _header_safe(cls, value: SecretStr) -> SecretStr:
        key = value.get_secret_value()
        if not key or not all("!" <= ch <= "~" for ch in key):
            # the message must not echo the key: say what is wrong, not what it is
            raise ValueError("must be a non-empty string of printable ASCII without spaces")
        return value


FIELD_NAMES = tuple(field.alias or name for name, field in AccountConfig.model_fields.items())


# --- parsing -------------------------------------------------------------------------------


def parse_accounts(
    text: str, *, setting: str = JSON_SOURCE, source: str | None = None
) -> tuple[AccountConfig, ...]:
    """The validated account list, or ConfigError naming the problem (never a key)."""
    accounts = parse_items(text, AccountConfig, setting=setting, source=source, what="account")
    if not accounts:
        raise ConfigError(setting, "empty list: configure at least one account", source=source)
    known_keys.learn(account.api_key.get_secret_value() for account in accounts)
    return accounts


Item = TypeVar("Item", bound=NamedItem)


def parse_items(
    text: str, model: type[Item], *, setting: str, source: str | None = None, what: str
) -> tuple[Item, ...]:
    """A JSON array of `model` objects, each with a unique `id` (accounts, TradingView
    sessions), or ConfigError naming each problem by item and field, never a secret: any
    string of the input that could be one is redacted from the message."""

    def problem(text: str) -> ConfigError:
        return ConfigError(setting, text, source=source)

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:  # its msg/lineno/colno carry no document text
        raise problem(f"not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    if not isinstance(data, list):
        raise problem(f"expected a JSON array of {what}s, got {_json_type(data)}")
    names = field_names(model)
    problems: list[str] = []
    items: list[Item] = []
    for index, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            problems.append(f"item {index}: expected an object, got {_json_type(item)}")
            continue
        try:
            items.append(model.model_validate(item))
        except ValidationError as exc:
            problems.extend(f"item {index}: {_describe(err, list(item), names)}" for err in exc.errors())
    seen: set[str] = set()
    for named in items:
        if named.id in seen:
            problems.append(f"duplicate {what} id '{named.id}'")
        seen.add(named.id)
    if problems:
        raise problem(Redaction(_possible_keys(data, field_names=names)).text("; ".join(problems)))
    return tuple(items)


def field_names(model: type[BaseModel]) -> tuple[str, ...]:
    """The names a JSON item gives `model`'s fields (their aliases)."""
    return tuple(field.alias or name for name, field in model.model_fields.items())


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _describe(err: Any, names: list[str], known: Sequence[str] = FIELD_NAMES) -> str:
    """One pydantic error in our words; `err["input"]` (the raw value) is never used, and a
    field that is not ours (`known`) is named by its position among the item's `names` (a
    key typed as a field name must not be printed)."""
    loc = [str(part) for part in err.get("loc", ())]
    field = loc[0] if loc else "item"
    kind = err.get("type", "")
    if kind == "missing":
        return f"missing '{field}'"
    if kind == "extra_forbidden" or field not in known:
        position = names.index(field) + 1 if field in names else "?"
        return f"field {position} is unknown (its name is not shown; known: {', '.join(known)})"
    if kind == "string_pattern_mismatch" and field == "id":
        return f"id must match {ACCOUNT_ID_PATTERN}"
    return f"'{field}' {plain_problem(err)}"


def _possible_keys(
    value: Any, *, under: str | None = None, field_names: Sequence[str] = FIELD_NAMES
) -> Iterator[str]:
    """The strings of an accounts (or sessions) file that could be secrets: every string and
    field name long enough (MIN_RUN), but an `id`'s value (a name, shown in a problem) and our
    field names."""
    if isinstance(value, str):
        if under != "id" and len(value) >= MIN_RUN:
            yield value
    elif isinstance(value, dict):
        for name, inner in value.items():
            if name not in field_names:
                yield from _possible_keys(name)
            yield from _possible_keys(inner, under=name, field_names=field_names)
    elif isinstance(value, list):
        for inner in value:
            yield from _possible_keys(inner, field_names=field_names)


# --- loading -------------------------------------------------------------------------------


class SecretClient(Protocol):
    def access_secret_version(self, *, name: str) -> Any: ...


def secret_version_name(secret: str, project: str | None, *, setting: str = SECRET_SOURCE) -> str:
    """Accept a full version name, a secret name, or a bare secret id (needs a project)."""
    if secret.startswith("projects/"):
        return secret if "/versions/" in secret else f"{secret}/versions/latest"
    if not project:
        raise ConfigError(
            setting,
            f"'{secret}' is not a full resource name "
            "(projects/<p>/secrets/<s>/versions/<v>) and GOOGLE_CLOUD_PROJECT is not set",
        )
    return f"projects/{project}/secrets/{secret}/versions/latest"


def read_secret(name: str, client: SecretClient | None = None, *, setting: str = SECRET_SOURCE) -> str:
    if client is None:  # lazily: only real/record mode with a secret pays for the import
        from google.cloud import secretmanager

        client = secretmanager.SecretManagerServiceClient()
    try:
        response = client.access_secret_version(name=name)
    except Exception as exc:  # whatever the API raised, the worker cannot start without it
        raise ConfigError(setting, f"cannot read {name}: {type(exc).__name__}") from None
    try:
        return bytes(response.payload.data).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(setting, f"{name} is not UTF-8 text") from None


def load_accounts(
    accounts_json: SecretStr | None,
    accounts_secret: str | None,
    project: str | None,
    *,
    secret_client: SecretClient | None = None,
) -> tuple[AccountConfig, ...]:
    """The JSON first; the secret only when the JSON is absent; else ()."""
    return load_listed(
        accounts_json, accounts_secret, project, parse_accounts, (JSON_SOURCE, SECRET_SOURCE), secret_client
    )


def load_listed(
    json_text: SecretStr | None,
    secret: str | None,
    project: str | None,
    parse: Callable[..., tuple[Item, ...]],
    settings: tuple[str, str],
    secret_client: SecretClient | None = None,
) -> tuple[Item, ...]:
    """A list of secrets (accounts, TradingView sessions) from its JSON setting first
    (`settings[0]`), from its Secret Manager version (`settings[1]`) only when the JSON is
    absent; else ()."""
    json_setting, secret_setting = settings
    if json_text is not None and json_text.get_secret_value().strip():
        return parse(json_text.get_secret_value(), setting=json_setting)
    if secret:
        name = secret_version_name(secret, project, setting=secret_setting)
        return parse(
            read_secret(name, secret_client, setting=secret_setting), setting=secret_setting, source=name
        )
    return ()


NO_ACCOUNTS_PROBLEM = (
    "no CHART-IMG accounts configured: set CHART_IMG_ACCOUNTS_JSON, --accounts-config-path "
    "or CHART_IMG_ACCOUNTS_SECRET"
)
NO_ACCOUNTS_MESSAGE = f"{JSON_SOURCE}: {NO_ACCOUNTS_PROBLEM}"


def require_accounts(
    accounts_json: SecretStr | None,
    accounts_secret: str | None,
    project: str | None,
    *,
    secret_client: SecretClient | None = None,
) -> tuple[AccountConfig, ...]:
    """load_accounts, for modes that call CHART-IMG: none at all is a configuration error."""
    accounts = load_accounts(accounts_json, accounts_secret, project, secret_client=secret_client)
    if not accounts:
        raise ConfigError(JSON_SOURCE, NO_ACCOUNTS_PROBLEM)
    return accounts
