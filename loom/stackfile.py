"""Where a running local stack says what it is: ``<state dir>/stack.json``.

``loom up`` writes it; the CLI and the chaos kit read it to find the emulator,
the control plane and the worker processes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILENAME = "stack.json"


def state_dir() -> Path:
    return Path(os.environ.get("LOOM_STATE_DIR") or ".loom").resolve()


def path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / FILENAME


def read(directory: Path | None = None) -> dict[str, Any] | None:
    """The running stack's description, or None when no stack file exists."""
    try:
        with open(path(directory), encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def write(info: dict[str, Any], directory: Path | None = None) -> Path:
    target = path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    # Owner-only: it holds the local control plane's signing key.
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
    os.replace(tmp, target)  # readers never see half a file
    return target


def remove(directory: Path | None = None) -> None:
    try:
        path(directory).unlink()
    except FileNotFoundError:
        pass
