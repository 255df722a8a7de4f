"""CHART-IMG accounts: where their keys come from, and which one the next call uses.

Config (contract §11.1, DESIGN §4.8): `[{"id", "apiKey", "dailyLimit"?, "ratePerSecond"?,
"burst"?}]` from CHART_IMG_ACCOUNTS_JSON (the CLI's --accounts-config-path lands there too),
else from the Secret Manager version CHART_IMG_ACCOUNTS_SECRET. A key never appears in an
error message, a repr or a log line: it is a SecretStr from parsing on.

AccountLimiter (contract §14.4): before each HTTP attempt, reserve one unit of an account's
daily quota in the UsageStore (least used first, ties by id), then take a token from that
account's bucket so the provider never sees more than its rate.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from worker_chart_export.core.errors import ConfigError
from worker_chart_export.core.pacing import MonotonicClock, TokenBucket
from worker_chart_export.core.types import Reservation
from worker_chart_export.core.usage import least_used_first
from worker_chart_export.logs import get_logger
from worker_chart_export.ports import UsageStore

if TYPE_CHECKING:
    from worker_chart_export.config import Settings

ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
JSON_SOURCE = "CHART_IMG_ACCOUNTS_JSON"
SECRET_SOURCE = "CHART_IMG_ACCOUNTS_SECRET"
WallClock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class AccountConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(pattern=ACCOUNT_ID_PATTERN)
    api_key: SecretStr = Field(alias="apiKey")
    daily_limit: int | None = Field(default=None, alias="dailyLimit", ge=1, strict=True)
    rate_per_second: float | None = Field(default=None, alias="ratePerSecond", gt=0)
    burst: int | None = Field(default=None, ge=1, strict=True)

    @field_validator("api_key")
    @classmethod
    def _header_safe(cls, value: SecretStr) -> SecretStr:
        key = value.get_secret_value()
        if not key or not all("!" <= ch <= "~" for ch in key):
            # the message must not echo the key: say what is wrong, not what it is
            raise ValueError("must be a non-empty string of printable ASCII without spaces")
        return value


# --- parsing -------------------------------------------------------------------------------


def parse_accounts(
    text: str, *, setting: str = JSON_SOURCE, source: str | None = None
) -> tuple[AccountConfig, ...]:
    """The validated account list, or ConfigError naming the problem (never a key)."""

    def problem(text: str) -> ConfigError:
        return ConfigError(setting, text, source=source)

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:  # its msg/lineno/colno carry no document text
        raise problem(f"not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    if not isinstance(data, list):
        raise problem(f"expected a JSON array of accounts, got {_json_type(data)}")
    if not data:
        raise problem("empty list: configure at least one account")
    problems: list[str] = []
    accounts: list[AccountConfig] = []
    for index, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            problems.append(f"item {index}: expected an object, got {_json_type(item)}")
            continue
        try:
            accounts.append(AccountConfig.model_validate(item))
        except ValidationError as exc:
            problems.extend(f"item {index}: {_describe(err)}" for err in exc.errors())
    seen: set[str] = set()
    for account in accounts:
        if account.id in seen:
            problems.append(f"duplicate account id '{account.id}'")
        seen.add(account.id)
    if problems:
        raise problem(_redact("; ".join(problems), data))
    return tuple(accounts)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _describe(err: Any) -> str:
    """One pydantic error in our words; `err["input"]` (the raw value) is never used."""
    loc = [str(part) for part in err.get("loc", ())]
    field = loc[0] if loc else "item"
    kind = err.get("type", "")
    if kind == "missing":
        return f"missing '{field}'"
    if kind == "extra_forbidden":
        return f"unknown field '{field[:64]}'"
    if kind == "string_pattern_mismatch" and field == "id":
        return f"id must match {ACCOUNT_ID_PATTERN}"
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"'{field}' {message[0].lower() + message[1:] if message else 'is invalid'}"


def _string_leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _string_leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _string_leaves(v)


def _redact(message: str, data: Any) -> str:
    """Belt and braces: no string of the input long enough to be a key survives in a message."""
    for leaf in sorted(set(_string_leaves(data)), key=len, reverse=True):
        if len(leaf) >= 8 and leaf in message:
            message = message.replace(leaf, "<redacted>")
    return message


# --- loading -------------------------------------------------------------------------------


class SecretClient(Protocol):
    def access_secret_version(self, *, name: str) -> Any: ...


def secret_version_name(secret: str, project: str | None) -> str:
    """Accept a full version name, a secret name, or a bare secret id (needs a project)."""
    if secret.startswith("projects/"):
        return secret if "/versions/" in secret else f"{secret}/versions/latest"
    if not project:
        raise ConfigError(
            SECRET_SOURCE,
            f"'{secret}' is not a full resource name "
            "(projects/<p>/secrets/<s>/versions/<v>) and GOOGLE_CLOUD_PROJECT is not set",
        )
    return f"projects/{project}/secrets/{secret}/versions/latest"


def read_secret(name: str, client: SecretClient | None = None) -> str:
    if client is None:  # lazily: only real/record mode with a secret pays for the import
        from google.cloud import secretmanager

        client = secretmanager.SecretManagerServiceClient()
    try:
        response = client.access_secret_version(name=name)
    except Exception as exc:  # whatever the API raised, the worker cannot start without it
        raise ConfigError(SECRET_SOURCE, f"cannot read {name}: {type(exc).__name__}") from None
    try:
        return bytes(response.payload.data).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(SECRET_SOURCE, f"{name} is not UTF-8 text") from None


def load_accounts(
    settings: Settings, *, secret_client: SecretClient | None = None
) -> tuple[AccountConfig, ...]:
    """CHART_IMG_ACCOUNTS_JSON first; the secret only when the JSON is absent; else ()."""
    raw = settings.chart_img_accounts_json
    if raw is not None and raw.get_secret_value().strip():
        return parse_accounts(raw.get_secret_value(), setting=JSON_SOURCE)
    if settings.chart_img_accounts_secret:
        name = secret_version_name(settings.chart_img_accounts_secret, settings.google_cloud_project)
        return parse_accounts(read_secret(name, secret_client), setting=SECRET_SOURCE, source=name)
    return ()


NO_ACCOUNTS_PROBLEM = (
    "no CHART-IMG accounts configured: set CHART_IMG_ACCOUNTS_JSON, --accounts-config-path "
    "or CHART_IMG_ACCOUNTS_SECRET"
)
NO_ACCOUNTS_MESSAGE = f"{JSON_SOURCE}: {NO_ACCOUNTS_PROBLEM}"


def require_accounts(
    settings: Settings, *, secret_client: SecretClient | None = None
) -> tuple[AccountConfig, ...]:
    """load_accounts, for modes that call CHART-IMG: none at all is a configuration error."""
    accounts = load_accounts(settings, secret_client=secret_client)
    if not accounts:
        raise ConfigError(JSON_SOURCE, NO_ACCOUNTS_PROBLEM)
    return accounts


# --- the limiter ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """Permission for one HTTP attempt: a reserved quota unit and a rate token, both taken."""

    account_id: str
    api_key: SecretStr
    reservation: Reservation
    paced_seconds: float  # how long we waited for the rate token


class Refusal(StrEnum):
    EXHAUSTED = "EXHAUSTED"  # every account is at its daily limit (no call may be made)
    NO_TIME = "NO_TIME"  # no rate token frees up within the time left


@dataclass(frozen=True)
class NoAccount:
    reason: Refusal
    exhausted_accounts: tuple[str, ...]


def next_utc_midnight(now: datetime) -> datetime:
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


class AccountLimiter:
    """Chooses, reserves and paces accounts. Thread-safe; one per process, shared by steps."""

    # Pace a little under the plan's rate: the provider counts arrivals, we count sends, and
    # scheduling jitter between the two must not turn into a 429 that burns the account.
    PACING_HEADROOM = 0.9

    def __init__(
        self,
        accounts: Sequence[AccountConfig],
        store: UsageStore,
        *,
        default_limit: int,
        default_rate: float,
        default_burst: int,
        now: WallClock = utc_now,
        monotonic: MonotonicClock,
        sleep: Callable[[float], None],
        exhausted_ttl: float = 60.0,
        pacing_headroom: float = PACING_HEADROOM,
    ) -> None:
        if not accounts:
            raise ValueError("AccountLimiter needs at least one account")
        self._accounts = {a.id: a for a in accounts}
        self._store = store
        self._limits = {a.id: a.daily_limit or default_limit for a in accounts}
        self._buckets = {
            a.id: TokenBucket(
                (a.rate_per_second or default_rate) * pacing_headroom,
                a.burst or default_burst,
                clock=monotonic,
            )
            for a in accounts
        }
        self._now = now
        self._monotonic = monotonic
        self._sleep = sleep
        self._ttl = timedelta(seconds=exhausted_ttl)
        self._lock = threading.Lock()
        self._reserve_locks = {a.id: threading.Lock() for a in accounts}
        self._in_flight = {a.id: 0 for a in accounts}  # picked, reservation not yet returned
        self._exhausted_until: dict[str, datetime] = {}

    @property
    def account_ids(self) -> tuple[str, ...]:
        return tuple(self._accounts)

    def acquire(self, *, tried: Collection[str] = (), max_wait: float) -> Lease | NoAccount:
        """Reserve quota on the best account and wait for its rate token (at most max_wait).

        Order: not yet tried for this request, then least used, then id; among those, one
        with a token free now wins. "Used" is the store's usageToday plus this process's
        reservations still in flight, so concurrent requests that read the same usage still
        spread over the accounts instead of all queueing on the first one.
        """
        now = self._now()
        live = [a for a in self._accounts if not self._cached_exhausted(a, now)]
        if not live:
            return NoAccount(Refusal.EXHAUSTED, self.exhausted_accounts())
        usages = self._store.read_usage(live, default_limits=self._limits, now=now)
        for usage in usages:
            if usage.exhausted:
                self._cache_exhausted(usage.account_id, now, until_midnight=False)
        open_usages = {u.account_id: u.usage_today for u in least_used_first(usages)}
        while open_usages:
            with self._lock:  # rank and take a token atomically: the next caller sees our pick
                ranked = sorted(
                    open_usages,
                    key=lambda a: (a in tried, open_usages[a] + self._in_flight[a], a),
                )
                picked = self._take_token(ranked, max_wait)
                if picked is None:
                    return NoAccount(Refusal.NO_TIME, self._exhausted_now(now))
                account_id, send_at = picked
                self._in_flight[account_id] += 1
            try:
                # One reservation per account at a time in this process: concurrent
                # transactions on one usage document only contend (Firestore aborts them).
                with self._reserve_locks[account_id]:
                    reservation = self._store.reserve(
                        account_id, default_limit=self._limits[account_id], now=now
                    )
            finally:
                with self._lock:
                    self._in_flight[account_id] -= 1
            if reservation.reserved:
                wait = max(0.0, send_at - self._monotonic())
                if wait > 0:
                    self._sleep(wait)
                key = self._accounts[account_id].api_key
                return Lease(account_id, key, reservation, wait)
            # someone else used it up since we read: the token is simply not used
            self._cache_exhausted(account_id, now, until_midnight=False)
            del open_usages[account_id]
        return NoAccount(Refusal.EXHAUSTED, self.exhausted_accounts())

    def _take_token(self, candidates: list[str], max_wait: float) -> tuple[str, float] | None:
        """(account, monotonic time it may send at): a free token first, else the soonest one."""
        for account_id in candidates:
            if self._buckets[account_id].try_acquire():
                return account_id, self._monotonic()
        soonest = min(candidates, key=lambda a: self._buckets[a].wait_time())
        wait = self._buckets[soonest].reserve(max(0.0, max_wait))
        return None if wait is None else (soonest, self._monotonic() + wait)

    def mark_exhausted(self, account_id: str) -> None:
        """After a 429 / "Limit Exceeded": out until the next UTC midnight (store + cache)."""
        now = self._now()
        self._cache_exhausted(account_id, now, until_midnight=True)
        try:
            self._store.mark_exhausted(account_id, default_limit=self._limits[account_id], now=now)
        except Exception as exc:  # best effort (§14.4): this process already stays off it
            get_logger().warning(
                "chart-img account exhaustion not persisted",
                accountId=account_id,
                errorKind=type(exc).__name__,
            )

    def exhausted_accounts(self) -> tuple[str, ...]:
        now = self._now()
        with self._lock:
            return self._exhausted_now(now)

    def _exhausted_now(self, now: datetime) -> tuple[str, ...]:
        return tuple(sorted(a for a, until in self._exhausted_until.items() if until > now))

    def _cached_exhausted(self, account_id: str, now: datetime) -> bool:
        with self._lock:
            until = self._exhausted_until.get(account_id)
            return until is not None and until > now

    def _cache_exhausted(self, account_id: str, now: datetime, *, until_midnight: bool) -> None:
        midnight = next_utc_midnight(now)
        until = midnight if until_midnight else min(now + self._ttl, midnight)
        with self._lock:
            self._exhausted_until[account_id] = max(until, self._exhausted_until.get(account_id, until))
