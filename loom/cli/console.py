"""What ``loom up`` prints in the foreground: readable lines on a terminal, JSON lines when piped.

The supervisor's own log uses structlog's ConsoleRenderer on a terminal. The functions are
separate processes that always log JSON (as they do in Lambda); on a terminal their output
goes through a pipe to :class:`ConsoleRelay`, which renders each JSON line the same way.
Piped or redirected, every line stays JSON for tools.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import IO, Any, TextIO

import structlog

from engine.log import configure as configure_json

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}


def wants_console(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def configure(level: str, stream: TextIO) -> bool:
    """Configure the supervisor's log for ``stream``; whether it is the console format."""
    if not wants_console(stream):
        configure_json(level, stream)
        return False
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=True),
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level.upper(), 20)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    return True


def render(line: str, renderer: Any) -> str:
    """One output line for people: a JSON log line rendered, anything else as it came."""
    text = line.rstrip("\n")
    try:
        event = json.loads(text)
    except ValueError:
        return text
    if not isinstance(event, dict) or "event" not in event:
        return text
    stamp = str(event.get("timestamp", ""))
    if "T" in stamp:  # 2026-12-01T01:02:03.456Z -> 01:02:03
        event["timestamp"] = stamp.split("T", 1)[1][:8]
    return str(renderer(None, str(event.get("level", "info")), event))


class ConsoleRelay:
    """A pipe the function processes write to; a thread renders each line onto ``out``."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        read_fd, write_fd = os.pipe()
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self.stream: IO[Any] = os.fdopen(write_fd, "w", encoding="utf-8", buffering=1)
        self._renderer = structlog.dev.ConsoleRenderer(colors=True)
        self._thread = threading.Thread(target=self._run, name="console-relay", daemon=True)

    def start(self) -> ConsoleRelay:
        self._thread.start()
        return self

    def _run(self) -> None:
        for line in self._reader:
            with contextlib.suppress(OSError, ValueError):
                self._out.write(render(line, self._renderer) + "\n")
                self._out.flush()

    def close(self) -> None:
        # Our copy of the write end; the children's copies close as they exit.
        with contextlib.suppress(OSError):
            self.stream.close()
        self._thread.join(timeout=2)
