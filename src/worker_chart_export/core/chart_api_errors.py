"""How CHART-IMG answers are classified (contract §13.5, DESIGN §4.9) and turned into errors."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from worker_chart_export.core.errors import ErrorCode, StepError

FINAL_STATUSES = frozenset({400, 401, 403, 404, 409, 422})
RETRY_STATUSES = frozenset({500, 502, 503, 504})
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MAX_MESSAGE = 300


class Disposition(StrEnum):
    SUCCESS = "SUCCESS"
    FINAL = "FINAL"  # same payload + account would fail again: record CHART_API_FAILED
    RETRY = "RETRY"  # transient: back off and try again (same or another account)
    ROTATE = "ROTATE"  # this account is out of quota: mark it exhausted, use the next one


def error_message(body: Any) -> str:
    """The API's own words from `{"message"}`, `{"error"}` or `{"errors": [...]}`; '' if none."""
    if isinstance(body, str):
        return body.strip()[:_MAX_MESSAGE]
    if not isinstance(body, dict):
        return ""
    for field in ("message", "error"):
        value = body.get(field)
        if isinstance(value, str) and value.strip():
            return value.strip()[:_MAX_MESSAGE]
    errors = body.get("errors")
    if isinstance(errors, list):
        parts = [
            e if isinstance(e, str) else str(e.get("message") or e.get("msg") or e)
            for e in errors
            if isinstance(e, str | dict)
        ]
        return "; ".join(parts)[:_MAX_MESSAGE]
    return ""


def is_limit_exceeded(http_status: int, body: Any) -> bool:
    return http_status == 429 or "limit exceeded" in error_message(body).lower()


def classify(http_status: int, body: Any = None) -> Disposition:
    if http_status == 200:
        return Disposition.SUCCESS
    if is_limit_exceeded(http_status, body):
        return Disposition.ROTATE
    if http_status in RETRY_STATUSES:
        return Disposition.RETRY
    return Disposition.FINAL


def looks_like_png(data: bytes) -> bool:
    return data.startswith(PNG_SIGNATURE)


def failure_from_response(http_status: int, body: Any, *, fixture: str | None = None) -> StepError:
    """A non-200 answer as the step error that goes into failures[] (never any header)."""
    message = error_message(body) or "no message in the response body"
    details: dict[str, Any] = {"httpStatus": http_status, "message": message}
    if fixture:
        details["fixture"] = fixture
    if is_limit_exceeded(http_status, body):
        return StepError(
            ErrorCode.CHART_API_LIMIT_EXCEEDED,
            f"CHART-IMG refused the request for quota reasons (HTTP {http_status}: {message})",
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
