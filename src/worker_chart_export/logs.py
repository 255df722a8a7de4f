"""structlog set-up: one JSON object per line in Cloud Logging's shape (severity, message)."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


def _cloud_logging_shape(_: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict["severity"] = _SEVERITY.get(method_name, "DEFAULT")
    event_dict["message"] = event_dict.pop("event", "")
    return event_dict


def configure_logging(*, service: str, env: str, stream: TextIO | None = None) -> None:
    """Idempotent; `stream` lets tests capture the lines (default stdout, as Cloud Run reads)."""
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service, env=env)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.processors.format_exc_info,
            _cloud_logging_shape,
            structlog.processors.JSONRenderer(sort_keys=False, default=str),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def get_logger() -> Any:
    return structlog.get_logger()
