"""Error classification and reporting of the GCS adapter (pure: no emulator needed)."""

from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from worker_chart_export.adapters.gcs_errors import describe_error, is_transient, redact


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_transient(status: int) -> None:
    assert is_transient(api_exceptions.from_http_status(status, "x"))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 412, 501])
def test_client_and_permanent_errors_are_not_transient(status: int) -> None:
    assert not is_transient(api_exceptions.from_http_status(status, "x"))


@pytest.mark.parametrize(
    "exc",
    [
        requests.exceptions.ConnectionError("reset"),
        requests.exceptions.ReadTimeout("slow"),
        auth_exceptions.TransportError("metadata server unreachable"),
        ConnectionResetError(),
    ],
)
def test_io_errors_are_transient(exc: BaseException) -> None:
    assert is_transient(exc)


def test_programming_errors_are_not_transient() -> None:
    assert not is_transient(ValueError("bad"))
    assert not is_transient(auth_exceptions.DefaultCredentialsError("no ADC"))


def test_redact_removes_tokens_and_keys() -> None:
    text = redact("Authorization: Bearer abc.DEF-1 token ya29.a0AfB_x and ?key=AIzaSECRET&alt=json")
    assert "abc.DEF-1" not in text
    assert "ya29." not in text
    assert "AIzaSECRET" not in text
    assert "alt=json" in text


def test_describe_error_without_response_is_status_and_class_only() -> None:
    exc = api_exceptions.from_http_status(503, "POST http://host/upload?key=SECRET: body")
    assert describe_error(exc) == "HTTP 503 ServiceUnavailable"
    assert describe_error(requests.exceptions.ConnectionError("http://h?key=SECRET")) == ("ConnectionError")
