"""JSON read back where the kit wrote an object: checked to be one, so a bad file or answer is said
where it is read instead of surfacing as an AttributeError somewhere later."""

from __future__ import annotations

import json
from typing import Any


def as_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object; a ValueError naming ``what`` otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {type(value).__name__}, not a JSON object")
    return value


def loads_object(raw: str | bytes, what: str) -> dict[str, Any]:
    """``json.loads`` of text that must hold an object."""
    return as_object(json.loads(raw), what)
