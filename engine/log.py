"""Structured JSON logs. Messages are fixed event names; the data goes in keys."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
# Keys whose values are credentials (request headers, a secret key): never written to a log.
SECRET_KEYS = frozenset(
    {
        "authorization",
        "x-amz-security-token",
        "cookie",
        "cookies",
        "set-cookie",
        "secret_access_key",
        "aws_secret_access_key",
    }
)
REDACTED = "[redacted]"


def redact(value: Any) -> Any:
    """``value`` with every secret header's value replaced, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if str(k).lower() in SECRET_KEYS else redact(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # exactly: a named tuple is data, not a container of headers
        return type(value)(redact(v) for v in value)
    return value


def _redact_secrets(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    return {k: REDACTED if str(k).lower() in SECRET_KEYS else redact(v) for k, v in event_dict.items()}


def configure(level: str = "INFO", stream: TextIO | None = None) -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _redact_secrets,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # A plain traceback: never the frames' local variables (a request's headers live there).
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def ensure_configured(level: str = "INFO") -> None:
    """Configure JSON logs unless something already has: structlog's default renderer would
    print an exception's local variables, request headers included."""
    if not structlog.is_configured():
        configure(level)


def get_logger(**bound: Any) -> Any:
    return structlog.get_logger("loom").bind(**bound)
