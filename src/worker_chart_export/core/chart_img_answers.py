"""How CHART-IMG answers are classified and turned into errors.

The worker contract (§13.4-13.5) reads every 429 as "this key is done for the day". The
provider's own documentation (Errors / API v2, Request Limit) says more, and refines it:
- 429 `Limit Exceeded` (or a 429 that says nothing else): the daily quota is used up:
  the account is exhausted for the window, as the contract says;
- 429 `Too Many Requests`: the per-second rate limit: the key cools down briefly and the
  request moves on; the account is *not* exhausted for the day;
- 401, 403 `Forbidden`: the key is wrong or inactive: the account is unusable (for this
  process) and the request moves to the next account;
- 403 `Exceed Max Usage Resolution/Parameter Limit (...)`: the template asks for more than
  the plan allows: final, like the other 4xx about the request;
- 5xx: transient, retried with backoff; other 4xx: final.
See docs/design.md, "CHART-IMG answers".
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from worker_chart_export.core.error_codes import ErrorCode, StepError

FINAL_STATUSES = frozenset({400, 401, 403, 404, 409, 422})
RETRY_STATUSES = frozenset({500, 502, 503, 504})
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MAX_MESSAGE = 300
_MAX_VALIDATION_ITEMS = 20


class Disposition(StrEnum):
    SUCCESS = "SUCCESS"
    FINAL = "FINAL"  # same payload would fail again on any account: CHART_API_FAILED
    RETRY = "RETRY"  # transient: back off and try again (same or another account)
    EXHAUSTED = "EXHAUSTED"  # daily quota used up: mark the account exhausted, next account now
    RATE_LIMITED = "RATE_LIMITED"  # per-second limit: cool the key down, next account now
    BAD_KEY = "BAD_KEY"  # key wrong or inactive: stop using the account, next account now


# Answers that describe the moment or the key, not the request: never frozen as fixtures.
NOT_ABOUT_THE_REQUEST = frozenset(
    {Disposition.RETRY, Disposition.EXHAUSTED, Disposition.RATE_LIMITED, Disposition.BAD_KEY}
)
# Dispositions whose next attempt goes to another account without a backoff.
ROTATING = frozenset({Disposition.EXHAUSTED, Disposition.RATE_LIMITED, Disposition.BAD_KEY})
RATE_LIMIT_MESSAGE = "too many requests"
QUOTA_MESSAGE = "limit exceeded"
BAD_KEY_MESSAGE = "forbidden"


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
    message = error_message(body).strip().lower()
    if QUOTA_MESSAGE in message:
        return Disposition.EXHAUSTED
    if http_status == 429:
        return Disposition.RATE_LIMITED if message == RATE_LIMIT_MESSAGE else Disposition.EXHAUSTED
    if http_status == 401 or (http_status == 403 and message == BAD_KEY_MESSAGE):
        return Disposition.BAD_KEY
    if http_status in RETRY_STATUSES:
        return Disposition.RETRY
    return Disposition.FINAL


def looks_like_png(data: bytes) -> bool:
    return data.startswith(PNG_SIGNATURE)


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
        details["limit"] = "daily" if disposition is Disposition.EXHAUSTED else "rate"
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


def not_a_png(content_type: str | None, size: int) -> StepError:
    return StepError(
        ErrorCode.CHART_API_FAILED,
        "CHART-IMG answered HTTP 200 but the body is not a PNG image",
        {"httpStatus": 200, "contentType": content_type or "", "bytes": size},
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


def accounts_exhausted(account_ids: list[str]) -> StepError:
    return StepError(
        ErrorCode.CHART_API_LIMIT_EXCEEDED,
        "every CHART-IMG account is at its daily limit; no request was sent",
        {"exhaustedAccounts": sorted(account_ids)},
    )
