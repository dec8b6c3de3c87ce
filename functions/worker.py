"""Worker: SQS step queue -> engine.process_batch -> partial batch response."""

from __future__ import annotations

from typing import Any

from engine.batch import process_batch
from functions import wiring
from functions.settings import Settings

wiring.ensure_logging()  # at init, as Lambda imports the handler
wiring.warm()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    settings = Settings.from_env()
    engine = wiring.engine(settings)
    remaining = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):

        def remaining() -> float:
            return float(context.get_remaining_time_in_millis()) / 1000.0

    return process_batch(
        engine,
        event,
        remaining=remaining,
        heartbeat_interval=settings.heartbeat_seconds,
        visibility_timeout=settings.visibility_timeout,
        # The queue's own visibility timeout is the function's (Lambda's minimum); the first beat
        # shortens it to LOOM_VISIBILITY_TIMEOUT, so a dead worker's batch comes back in seconds.
        beat_first=True,
    )
