"""Reading the JSON log lines our processes print (structlog's JSONRenderer)."""

from __future__ import annotations

import json
from typing import Any


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object; other output is skipped."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
