"""Sweeper: the 1-minute schedule -> engine.sweep."""

from __future__ import annotations

import zlib
from dataclasses import asdict
from typing import Any

from functions import wiring

wiring.ensure_logging()  # at init, as Lambda imports the handler


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    remaining = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):

        def remaining() -> float:
            return float(context.get_remaining_time_in_millis()) / 1000.0

    report = wiring.engine().sweep(remaining=remaining, shard_offset=shard_offset(context))
    return asdict(report)


def shard_offset(context: Any) -> int:
    """Where this invocation's sweep starts among the shards, from its request id: two sweeps
    that overlap start apart instead of judging the same executions in step (engine.sweeper)."""
    request_id = getattr(context, "aws_request_id", None)
    return zlib.crc32(request_id.encode()) if isinstance(request_id, str) else 0
