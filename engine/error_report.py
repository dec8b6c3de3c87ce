"""What Loom stores about a failure: type, message and traceback, each bounded in bytes.

Stored errors go into items with a hard size limit (the step's history record and the
FAILED execution item, 400 KB each), so every part has a stated bound and keeps its
head and its tail when cut: the start of a message says what went wrong, its end often
says where; the innermost frames of a traceback say where, the outermost how it got there.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from engine.limits import truncate_middle, utf8_len


@dataclass(frozen=True)
class Detail:
    """How much of a failure to keep."""

    message_bytes: int
    traceback_bytes: int


#: A failure stored in full: about 3.5 KB of JSON at most (``ERROR_RESERVE`` covers it).
FULL = Detail(message_bytes=1024, traceback_bytes=2048)
#: A failure stored briefly (attempts after ``limits.FULL_DETAIL_ATTEMPTS``): under 400 bytes.
BRIEF = Detail(message_bytes=256, traceback_bytes=0)


def error_info(error: BaseException, detail: Detail = FULL) -> dict[str, Any]:
    """A JSON-able, size-bounded description of an exception."""
    info: dict[str, Any] = {
        "type": type(error).__name__,
        "message": truncate_middle(str(error), detail.message_bytes),
    }
    if detail.traceback_bytes > 0 and error.__traceback__ is not None:
        info["traceback"] = frames(error, detail.traceback_bytes)
    return info


def frames(error: BaseException, limit: int) -> list[dict[str, Any]]:
    """The traceback's frames, innermost last; frames from the middle are cut to fit ``limit``."""
    summary = traceback.extract_tb(error.__traceback__)
    listed = [{"file": _short(f.filename), "line": f.lineno, "function": f.name} for f in summary]
    sizes = [_frame_size(f) for f in listed]
    if sum(sizes) <= limit:
        return listed
    # Keep the outermost frame, then as many innermost ones as fit, and say how many went.
    head, budget = listed[:1], limit - sizes[0] - 40
    tail: list[dict[str, Any]] = []
    for frame, size in zip(reversed(listed[1:]), reversed(sizes[1:]), strict=True):
        if size > budget:
            break
        tail.insert(0, frame)
        budget -= size
    cut = len(listed) - len(head) - len(tail)
    return [*head, {"cut_frames": cut}, *tail]


def _short(filename: str) -> str:
    # The last two parts (package/module.py) say where; the rest is the machine's layout.
    return str(PurePath(*PurePath(filename).parts[-2:]))


def _frame_size(frame: dict[str, Any]) -> int:
    return utf8_len(str(frame["file"])) + utf8_len(str(frame["function"])) + 40


def one_line(info: dict[str, Any] | None) -> str:
    """``KeyError: 'user' (at workflows/orders.py:12 in reserve)``: the cause in one line."""
    if not info:
        return ""
    text = f"{info.get('type', 'Error')}: {info.get('message', '')}"
    trace = [f for f in info.get("traceback") or [] if "file" in f]
    if trace:
        last = trace[-1]
        text += f" (at {last['file']}:{last['line']} in {last['function']})"
    return text
