"""What the CLI prints: aligned tables and key/value blocks for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

MAX_CELL = 60
_NO_LIMIT = 1 << 30


def _is_id(key: str) -> bool:
    """An id is something to copy and paste: never shortened."""
    return key == "id" or key.endswith("_id")


def cell(value: Any, width: int = MAX_CELL) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    compact = isinstance(value, (dict, list))
    text = json.dumps(value, separators=(",", ":"), sort_keys=True) if compact else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    out: TextIO | None = None,
    *,
    width: int = MAX_CELL,
    details: str | None = None,
) -> None:
    """``columns`` are (key, header) pairs; missing keys print as '-'. ``details``: the key of
    a list of lines printed whole, indented, under their row (causes, tracebacks)."""
    out = out or sys.stdout
    if not rows:
        out.write("(none)\n")
        return
    grid = [[header.upper() for _, header in columns]] + [
        [cell(row.get(key), _NO_LIMIT if _is_id(key) else width) for key, _ in columns] for row in rows
    ]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    for n, line in enumerate(grid):
        out.write("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() + "\n")
        extra = rows[n - 1].get(details) if details and n > 0 else None
        for text in extra or []:
            out.write(f"      {text}\n")


def fields(data: Mapping[str, Any], keys: Sequence[tuple[str, str]], out: TextIO | None = None) -> None:
    """One ``label: value`` line per key; nested documents are printed as indented JSON."""
    out = out or sys.stdout
    width = max(len(label) for _, label in keys)
    for key, label in keys:
        value = data.get(key)
        if isinstance(value, (dict, list)) and value:
            text = json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + " " * (width + 2))
        else:
            text = cell(value) if not isinstance(value, str) else value
        out.write(f"{label + ':':<{width + 1}} {text}\n")


def as_json(data: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def error(message: str) -> None:
    sys.stderr.write(f"loom: error: {message}\n")
