"""Which processes are the stack's: a pid is only trusted with its start time and command line.

A pid alone proves nothing: after the stack dies (or the machine reboots) the kernel hands
the same number to another program. ``stack.json`` therefore records, for every pid, when
that process started (the boot id and field 22 of ``/proc/<pid>/stat``, in clock ticks
since boot) and its command line. ``loom down`` and the next ``loom up`` signal a pid only
when both still match: a stale file can never make them kill someone else's program.

Where there is no ``/proc`` (macOS), ``ps -o lstart= -o command=`` gives the same two facts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    started: str  # "<boot id>:<start ticks>" on Linux, ps's lstart elsewhere
    cmdline: str

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _boot_id() -> str:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def _from_proc(pid: int) -> ProcessIdentity | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has no command line and is already dead
        return None
    start_ticks = fields[19]  # field 22 overall: fields[0] is field 3
    return ProcessIdentity(
        pid, f"{_boot_id()}:{start_ticks}", raw.replace(b"\0", b" ").decode(errors="replace").strip()
    )


def _from_ps(pid: int) -> ProcessIdentity | None:
    done = subprocess.run(
        ["ps", "-p", str(pid), "-o", "lstart=", "-o", "command="], capture_output=True, text=True, check=False
    )
    line = done.stdout.strip()
    if done.returncode != 0 or not line:
        return None
    # lstart is five fields: "Tue Dec  1 01:02:03 2026".
    parts = line.split(None, 5)
    return ProcessIdentity(pid, " ".join(parts[:5]), parts[5] if len(parts) > 5 else "")


def identify(pid: int | None) -> ProcessIdentity | None:
    """The running process ``pid`` as it is now, or None when there is none."""
    if not pid or pid <= 0:
        return None
    return _from_proc(pid) if _PROC.joinpath("self").exists() else _from_ps(pid)


def is_same(recorded: Mapping[str, Any] | None) -> bool:
    """Whether the process recorded in ``recorded`` (pid, started, cmdline) is still the one running."""
    if not recorded or not recorded.get("pid"):
        return False
    now = identify(int(recorded["pid"]))
    if now is None or not now.cmdline:  # no command line (a kernel thread, mid-exec) proves nothing
        return False
    return now.started == recorded.get("started") and now.cmdline == recorded.get("cmdline")


def records(pids: Iterable[int]) -> dict[str, dict[str, Any]]:
    """Identity records for ``pids`` (by pid, as text: JSON keys), skipping those already gone."""
    out: dict[str, dict[str, Any]] = {}
    for pid in pids:
        found = identify(pid)
        if found is not None:
            out[str(pid)] = found.record()
    return out


def owned(known: Mapping[str, Mapping[str, Any]] | None) -> list[int]:
    """The recorded pids that are provably still the same processes."""
    return sorted(int(pid) for pid, rec in (known or {}).items() if is_same(rec))


def signal_owned(known: Mapping[str, Mapping[str, Any]] | None, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every recorded process that is provably the one recorded; the pids signalled."""
    hit = []
    for pid in owned(known):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            hit.append(pid)
    return hit
