"""Where a running local stack says what it is: ``<state dir>/stack.json``.

``loom up`` writes it; the CLI and the chaos kit read it to find the emulator,
the control plane and the worker processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from loom.local import private, procs

FILENAME = "stack.json"


def state_dir() -> Path:
    return Path(os.environ.get("LOOM_STATE_DIR") or ".loom").resolve()


def supervisor_running(info: dict[str, Any]) -> bool:
    """Whether the stack's supervisor is still the process that wrote ``info``.

    A description without a supervisor (``--emulator aws``, a test's control plane) has
    nothing local to die; it counts as running.
    """
    pid = info.get("supervisor_pid")
    if not pid:
        return True
    known = (info.get("processes") or {}).get(str(pid))
    return procs.is_same(known)


def died_at(directory: Path | None = None) -> float | None:
    """When the supervisor was last seen: it touches the stack file every few seconds."""
    try:
        return path(directory).stat().st_mtime
    except FileNotFoundError:
        return None


def no_stack_message(directory: Path | None = None) -> str:
    """Where the lookup went, and how to point it at a stack started from another directory."""
    where = directory or state_dir()
    source = "LOOM_STATE_DIR" if os.environ.get("LOOM_STATE_DIR") else "the current directory's .loom"
    return (
        f"no local stack is running: run `loom up`, or pass --url (looked for {where / FILENAME}, from {source}; "
        "a stack started in another directory keeps its state there: set LOOM_STATE_DIR=<that dir>/.loom, "
        "or pass --state-dir where the command takes one)"
    )


def not_running_message(info: dict[str, Any], directory: Path | None = None) -> str:
    where = info.get("control_plane_url") or str(directory or state_dir())
    last = died_at(directory)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last)) if last else "an unknown time"
    return (
        f"the stack at {where} is not running (it died at {when}, supervisor pid {info.get('supervisor_pid')}); "
        "`loom up` starts it again and ends what is left of it"
    )


def path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / FILENAME


def read(directory: Path | None = None) -> dict[str, Any] | None:
    """The running stack's description, or None when no stack file exists."""
    try:
        with open(path(directory), encoding="utf-8") as fh:
            info = json.load(fh)
    except FileNotFoundError:
        return None
    if not isinstance(info, dict):
        raise ValueError(f"{path(directory)} holds {type(info).__name__}, not a stack's description")
    return info


def write(info: dict[str, Any], directory: Path | None = None) -> Path:
    target = path(directory)
    private.private_dir(target.parent)
    tmp = target.with_suffix(".tmp")
    # Owner-only: it holds the stack's keys (control plane, emulator admin) and the console's token.
    with private.open_write(tmp) as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
    os.replace(tmp, target)  # readers never see half a file
    return target


def touch(directory: Path | None = None) -> None:
    """The supervisor's heartbeat: the file's mtime says when it was last alive."""
    try:
        os.utime(path(directory))
    except FileNotFoundError:
        pass


def remove(directory: Path | None = None) -> None:
    try:
        path(directory).unlink()
    except FileNotFoundError:
        pass
