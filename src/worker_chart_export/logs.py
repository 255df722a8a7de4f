"""structlog set-up: one JSON object per line in Cloud Logging's shape (severity, message)."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict

_SEVERITY = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}


def _cloud_logging_shape(_: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["severity"] = _SEVERITY.get(method_name, "DEFAULT")
    event_dict["message"] = event_dict.pop("event", "")
    return event_dict


def configure_logging(*, service: str, env: str, stream: TextIO | None = None) -> None:
    """Idempotent; `stream` lets tests capture the lines (default stdout, as Cloud Run reads)."""
    global _base_logger
    identity = {"service": service, "env": env}

    def add_identity(_: Any, __: str, event_dict: EventDict) -> EventDict:
        # A processor, not a context variable: request threads (gunicorn) start with an
        # empty context, and every line must still say which service and env wrote it.
        for key, value in identity.items():
            event_dict.setdefault(key, value)
        return event_dict

    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_identity,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.processors.format_exc_info,
            _cloud_logging_shape,
            structlog.processors.JSONRenderer(sort_keys=False, default=str),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )
    _base_logger = None


_base_logger: Any = None


def get_logger() -> Any:
    """The configured logger, built once per configuration: most events log one line, and
    assembling a logger from the configuration would cost as much as rendering it."""
    global _base_logger
    if _base_logger is None:
        _base_logger = structlog.get_logger().bind()
    return _base_logger
