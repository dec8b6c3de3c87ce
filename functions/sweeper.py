"""Sweeper: the 1-minute schedule -> engine.sweep."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from functions import wiring

wiring.ensure_logging()  # at init, as Lambda imports the handler


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    remaining = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):

        def remaining() -> float:
            return float(context.get_remaining_time_in_millis()) / 1000.0

    report = wiring.engine().sweep(remaining=remaining)
    return asdict(report)
