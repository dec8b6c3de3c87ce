"""Local time travel: the offset file every function's clock adds to real time.

``functions.wiring.FileOffsetClock`` reads it (through LOOM_CLOCK_OFFSET_FILE);
``loom time advance`` writes it. Only the functions' clock moves: the emulator
keeps real time, so SQS delays and visibility timeouts are unchanged and the
sweeper is what wakes a long sleep.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

from engine.clock import MAX_OFFSET_SECONDS, valid_offset
from loom.local import private

FILENAME = "clock_offset"
# Each move of the offset, "wall_epoch offset" a line, beside the offset file: a stamp written
# on the moved clock maps back to the wall clock through the offset in force when it was written
# (the console ages executions on the wall clock). Only the newest MAX_MOVES are kept.
MOVES_SUFFIX = ".moves"
MAX_MOVES = 1000
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``15m``, ``2h``, ``1d`` or a bare number of seconds."""
    total = 0.0
    parts = re.findall(r"\d+(?:\.\d+)?\s*[smhd]?", text.strip())
    if not parts or "".join(parts).replace(" ", "") != text.strip().replace(" ", ""):
        raise ValueError(f"not a duration: {text!r} (try 90s, 15m, 2h, 1d, or 1h30m)")
    for part in parts:
        match = _DURATION.match(part)
        assert match is not None
        total += float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(total) or total > MAX_OFFSET_SECONDS:
        shown = text if len(text) <= 24 else text[:20] + "..."
        raise ValueError(f"{shown!r} is too far: the clock moves at most {LIMIT_TEXT} from real time")
    return total


LIMIT_TEXT = f"{MAX_OFFSET_SECONDS / 86400:.0f}d (10 years)"


def read_offset(path: Path) -> float:
    """The offset in ``path``; a value that is not a number or out of bounds reads as a ValueError."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return 0.0
    try:
        seconds = float(text or 0)
    except ValueError:
        raise ValueError(f"{path} does not hold a number of seconds; `loom time reset` fixes it") from None
    if not valid_offset(seconds):
        raise ValueError(f"{path} holds {text}, beyond {LIMIT_TEXT}; `loom time reset` fixes it")
    return seconds


def write_offset(path: Path, seconds: float) -> float:
    if not valid_offset(seconds):
        raise ValueError(f"a clock offset of {seconds}s is beyond {LIMIT_TEXT}; `loom time reset` first")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with private.open_write(tmp) as fh:
        fh.write(f"{seconds:.3f}\n")
    os.replace(tmp, path)  # readers see the old value or the new one, never half
    _note_move(path, seconds)
    return seconds


def moves_path(path: Path) -> Path:
    return path.with_name(path.name + MOVES_SUFFIX)


def read_moves(path: Path) -> list[tuple[float, float]]:
    """Each move of the offset in ``path`` as (wall-clock epoch, new offset), oldest first; a
    line that is not two numbers is skipped (the log explains, it never decides the clock)."""
    try:
        lines = moves_path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out: list[tuple[float, float]] = []
    for line in lines:
        parts = line.split()
        try:
            at, offset = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            continue
        if len(parts) == 2 and math.isfinite(at) and valid_offset(offset):
            out.append((at, offset))
    return out


def _note_move(path: Path, seconds: float) -> None:
    kept = [*read_moves(path)[-(MAX_MOVES - 1) :], (time.time(), seconds)]
    tmp = moves_path(path).with_name(moves_path(path).name + ".tmp")
    with private.open_write(tmp) as fh:
        fh.write("".join(f"{at:.3f} {offset:.3f}\n" for at, offset in kept))
    os.replace(tmp, moves_path(path))


def advance(path: Path, seconds: float) -> float:
    if seconds < 0:
        raise ValueError("time only moves forward; use `loom time reset` to go back to real time")
    if not math.isfinite(seconds):
        raise ValueError("the clock moves by a finite duration")
    current = read_offset(path)
    if not valid_offset(current + seconds):
        raise ValueError(
            f"the clock is already {format_duration(current)} ahead; {format_duration(seconds)} more would pass "
            f"{LIMIT_TEXT}; `loom time reset` first"
        )
    return write_offset(path, current + seconds)


def reset(path: Path) -> float:
    return write_offset(path, 0.0)  # works whatever the file held


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"
