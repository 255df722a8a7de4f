"""How CHART-IMG answers are classified and turned into errors.

The worker contract (§13.4-13.5) reads every 429 as "this key is done for the day". The
provider's documentation (Errors / API v2, Request Limit) gives two 429 examples, `Too Many
Requests` and `Limit Exceeded`, "exceed the usage limit or the rate limit", and promises no
complete list; its v2 status table has no 401 row. So no answer we cannot name retires a key
on first sight:
- 429 `Limit Exceeded` (the documented daily-limit wording, any case, surrounding
  punctuation ignored): the daily quota is used up: the account is exhausted for the UTC day;
- any other 429 (`Too Many Requests`, an empty body, an unknown wording): the key cools down
  (Retry-After, else an escalating backoff: core/chart_img/key_history.py) and the request moves on; a
  key that keeps answering so is exhausted by core/chart_img/key_history.py's streak rule;
- the daily-limit wording under another status (undocumented): cooled, like an unknown 429;
- 401, 403 `Forbidden`: the key was refused: the request moves to the next account; the key
  is disabled only when refused again (core/chart_img/key_history.py);
- 403 `Exceed Max Usage Resolution/Parameter Limit (...)`: the template asks for more than
  the plan allows: final, like the other 4xx about the request;
- 5xx (the CDN's 52x timeouts among them), 408 Request Timeout, 425 Too Early: transient,
  retried with backoff (the next answer may well be a chart); a 200 that is not a whole PNG
  (an HTML page, a body cut short: core/png.py) too; other 4xx: final (the key stays usable).
See docs/design.md, "CHART-IMG answers".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from worker_chart_export.core.error_codes import ErrorCode, StepError

# Transient below 500: the request took too long to arrive (408), or came too early (425).
RETRY_BELOW_500 = frozenset({408, 425})
_MAX_MESSAGE = 300
_MAX_VALIDATION_ITEMS = 20


class Disposition(StrEnum):
    SUCCESS = "SUCCESS"
    FINAL = "FINAL"  # same payload would fail again on any account: CHART_API_FAILED
    RETRY = "RETRY"  # transient: back off and try again (same or another account)
    EXHAUSTED = "EXHAUSTED"  # daily quota used up: mark the account exhausted, next account now
    RATE_LIMITED = "RATE_LIMITED"  # any other 429: cool the key down, next account now
    BAD_KEY = "BAD_KEY"  # key refused: next account now; disabled when refused again


# Answers that describe the moment or the key, not the request: never frozen as fixtures.
NOT_ABOUT_THE_REQUEST = frozenset(
    {Disposition.RETRY, Disposition.EXHAUSTED, Disposition.RATE_LIMITED, Disposition.BAD_KEY}
)
# Dispositions whose next attempt goes to another account without a backoff.
ROTATING = frozenset({Disposition.EXHAUSTED, Disposition.RATE_LIMITED, Disposition.BAD_KEY})
RATE_LIMIT_WORDING = "too many requests"
# The daily quota's words: the 429 example, and the status table's "exceed the usage limit"
# (with its tenses). Only whole messages: "Rate Limit Exceeded" is not the daily quota.
DAILY_LIMIT_WORDINGS = frozenset(
    {"limit exceeded", "usage limit exceeded", "exceed the usage limit", "exceeded the usage limit"}
)
BAD_KEY_WORDING = "forbidden"
_NOT_WORDS = re.compile(r"[^a-z0-9]+")


def wording(message: str) -> str:
    """A message as words: lower case, punctuation and spacing ignored ("Limit Exceeded." and
    "limit-exceeded" are "limit exceeded")."""
    return " ".join(_NOT_WORDS.split(message.lower())).strip()


def says_daily_limit(message: str) -> bool:
    return wording(message) in DAILY_LIMIT_WORDINGS


def error_message(body: Any) -> str:
    """The API's own words from `{"message"}`, `{"error"}`, `{"errors": [...]}` or a 422
    array `[{"msg", "param"}]`; '' if none."""
    if isinstance(body, str):
        return body.strip()[:_MAX_MESSAGE]
    if isinstance(body, list):
        return _validation_summary(body)
    if not isinstance(body, dict):
        return ""
    for field in ("message", "error"):
        value = body.get(field)
        if isinstance(value, str) and value.strip():
            return value.strip()[:_MAX_MESSAGE]
    errors = body.get("errors")
    if isinstance(errors, list):
        return _validation_summary(errors)
    return ""


def _validation_summary(errors: list[Any]) -> str:
    parts = []
    for item in errors:
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            text = str(item.get("message") or item.get("msg") or item)
            param = item.get("param")
            parts.append(f"{param}: {text}" if isinstance(param, str) and param else text)
    return "; ".join(parts)[:_MAX_MESSAGE]


def validation_errors(body: Any) -> list[dict[str, str]]:
    """Each `{param, msg}` of a 422 array (bare, or under `errors`); the `value` is left
    out: it is our own request echoed back."""
    items = body.get("errors") if isinstance(body, dict) else body
    if not isinstance(items, list):
        return []
    kept = []
    for item in items[:_MAX_VALIDATION_ITEMS]:
        if isinstance(item, dict) and ("msg" in item or "param" in item):
            kept.append({"param": str(item.get("param", ""))[:100], "msg": str(item.get("msg", ""))[:200]})
    return kept


def classify(http_status: int, body: Any = None) -> Disposition:
    if http_status == 200:
        return Disposition.SUCCESS
    message = error_message(body)
    if http_status == 429:
        return Disposition.EXHAUSTED if says_daily_limit(message) else Disposition.RATE_LIMITED
    if says_daily_limit(message):
        return Disposition.RATE_LIMITED  # quota's words, undocumented status: cooled, not retired
    if http_status == 401 or (http_status == 403 and wording(message) == BAD_KEY_WORDING):
        return Disposition.BAD_KEY
    if http_status >= 500 or http_status in RETRY_BELOW_500:
        return Disposition.RETRY
    return Disposition.FINAL


def limit_kind(disposition: Disposition, message: str) -> str:
    """`details.limit` of a quota failure: the daily quota, the documented rate limit, or a
    429 we cannot name (cooled as the rate limit is)."""
    if disposition is Disposition.EXHAUSTED:
        return "daily"
    return "rate" if wording(message) == RATE_LIMIT_WORDING else "unrecognised"


def failure_from_response(
    http_status: int, body: Any, *, fixture: str | None = None, template_id: str | None = None
) -> StepError:
    """A non-200 answer as the step error that goes into failures[] (never any header)."""
    message = error_message(body) or "no message in the response body"
    details: dict[str, Any] = {"httpStatus": http_status, "message": message}
    if fixture:
        details["fixture"] = fixture
    validation = validation_errors(body)
    if validation:
        details["errors"] = validation
    disposition = classify(http_status, body)
    if disposition in (Disposition.EXHAUSTED, Disposition.RATE_LIMITED):
        details["limit"] = limit_kind(disposition, error_message(body))
        return StepError(
            ErrorCode.CHART_API_LIMIT_EXCEEDED,
            f"CHART-IMG refused the request for quota reasons (HTTP {http_status}: {message})",
            details,
        )
    if disposition is Disposition.BAD_KEY:
        details["errorKind"] = "bad_key"
        return StepError(
            ErrorCode.CHART_API_FAILED,
            f"CHART-IMG refused the account's API key (HTTP {http_status}: {message})",
            details,
        )
    if http_status == 403 and message.lower().startswith("exceed max usage"):
        details["errorKind"] = "plan_limit"
        about = f"template {template_id}" if template_id else "the template"
        return StepError(
            ErrorCode.CHART_API_FAILED,
            f"{about} asks for more than the CHART-IMG plan allows: {message}",
            details,
        )
    return StepError(ErrorCode.CHART_API_FAILED, f"CHART-IMG answered HTTP {http_status}: {message}", details)


def refused_everywhere(error: StepError, account_ids: list[str]) -> StepError:
    """A request every account it could go to refused (401, 403 `Forbidden`), none of them
    refused for another request: the request is what CHART-IMG refuses, not the keys. Its
    final failure; the keys stay in service."""
    return StepError(
        ErrorCode.CHART_API_FAILED,
        f"CHART-IMG refused this request on every account it could go to "
        f"(HTTP {error.details.get('httpStatus')}: {error.details.get('message')}); "
        "the request, not a key, is refused: no key was set aside",
        {**error.details, "errorKind": "request_refused", "refusedBy": account_ids},
    )


def not_a_png(content_type: str | None, size: int, problem: str) -> StepError:
    """A 200 whose body is no whole PNG (core/png.py says what is wrong): transient, retried."""
    return StepError(
        ErrorCode.CHART_API_FAILED,
        f"CHART-IMG answered HTTP 200 but the body is not a whole PNG image: {problem}",
        {"httpStatus": 200, "contentType": content_type or "", "bytes": size, "errorKind": "not_png"},
    )


def mock_missing(fixture_key: str, directory: Path) -> StepError:
    return StepError(
        ErrorCode.CHART_API_MOCK_MISSING,
        f"no recorded CHART-IMG response for {fixture_key} (mock mode makes no HTTP calls)",
        {
            "fixtureKey": fixture_key,
            "fixturesDir": str(directory),
            "expected": [f"{fixture_key}.png", f"{fixture_key}__<status>_<REASON>.json"],
        },
    )


def accounts_exhausted(account_ids: list[str], other_plans: Sequence[tuple[str, str]] = ()) -> StepError:
    """Every account that could serve the chart is at its daily limit; `other_plans`: the
    (account, plan) whose plan cannot serve it (they may well have quota: said so)."""
    if not other_plans:
        return StepError(
            ErrorCode.CHART_API_LIMIT_EXCEEDED,
            "every CHART-IMG account is at its daily limit; no request was sent",
            {"exhaustedAccounts": sorted(account_ids)},
        )
    named = ", ".join(f"{a} ({plan})" for a, plan in other_plans)
    return StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        "every CHART-IMG account whose plan can serve this chart is at its daily limit; no request "
        f"was sent; {named} cannot serve it: the template asks for more than their plan allows",
        {
            "exhaustedAccounts": sorted(account_ids),
            "otherPlanAccounts": [{"accountId": a, "plan": plan} for a, plan in other_plans],
        },
    )
