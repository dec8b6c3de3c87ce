"""Sweeper: the 1-minute schedule -> engine.sweep."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from functions import wiring

wiring.ensure_logging()  # at init, as Lambda imports the handler


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    report = wiring.engine().sweep()
    return asdict(report)
