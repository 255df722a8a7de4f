"""What a Cloud Storage error says, in our words: whether it is worth another try
(`is_transient`), and a one-line description that never quotes the request or a credential
(`describe_error`, `redact`)."""

from __future__ import annotations

import http.client
import re
from typing import Any

import requests
import urllib3
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

# Same family the library itself treats as transient (google.cloud.storage.retry). api_core
# has no class for 408 (it surfaces as a plain ClientError), hence the status-code check too.
TRANSIENT_STATUS_CODES = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    api_exceptions.TooManyRequests,
    api_exceptions.InternalServerError,
    api_exceptions.BadGateway,
    api_exceptions.ServiceUnavailable,
    api_exceptions.GatewayTimeout,
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    ConnectionError,
    TimeoutError,
    http.client.BadStatusLine,
    http.client.IncompleteRead,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    auth_exceptions.TransportError,
)

# Scrubbed from any server-supplied text we quote: bearer tokens, OAuth access tokens and
# key/token query parameters. GCS does not echo them, but a proxy in between might. Unicode
# classes on purpose (a scrubber, not a check: any space or case fold widens what it removes).
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+", re.UNICODE), r"\1 <redacted>"),
    (re.compile(r"\bya29\.[A-Za-z0-9._-]+", re.UNICODE), "<redacted>"),
    (re.compile(r"(?i)\b(access_token|token|key|api_key|apikey)=[^&\s\"']+", re.UNICODE), r"\1=<redacted>"),
)
_MAX_DETAIL_CHARS = 200


def is_transient(exc: BaseException) -> bool:
    """408/429/5xx, connection resets, timeouts and auth transport errors are worth a retry."""
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        return exc.code in TRANSIENT_STATUS_CODES
    return isinstance(exc, auth_exceptions.RefreshError) and bool(getattr(exc, "retryable", False))


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def describe_error(exc: BaseException) -> str:
    """`HTTP 503 ServiceUnavailable: <server message>` or the exception class for I/O errors.

    Never the exception's full text: for API errors it holds the request URL and raw body.
    """
    name = type(exc).__name__
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        status = f"HTTP {exc.code} " if exc.code else ""
        detail = _server_message(exc)
        return f"{status}{name}" + (f": {detail}" if detail else "")
    return name


def _server_message(exc: api_exceptions.GoogleAPICallError) -> str:
    """The `error.message` of a JSON API error body, redacted and truncated."""
    response: Any = exc.response
    try:
        message = response.json()["error"]["message"]
    except Exception:  # no response, not JSON, unexpected shape: say nothing rather than guess
        return ""
    if not isinstance(message, str):
        return ""
    message = redact(" ".join(message.split()))
    if len(message) > _MAX_DETAIL_CHARS:
        message = message[: _MAX_DETAIL_CHARS - 3] + "..."
    return message
