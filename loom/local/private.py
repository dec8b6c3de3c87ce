"""Owner-only files and directories: what the local stack writes is nobody else's to read.

The state dir holds the stack's keys (stack.json), the emulator's data (every item, callback
tokens included) and the logs. Another local user must read none of it, so the directory is
0700 and each file 0600, whatever the umask, and a file or directory left wider by an older
version is narrowed when it is opened again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, BinaryIO, Literal, TextIO, overload

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` (and missing parents) created, and ``path`` itself made owner-only."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def _fd(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    os.fchmod(fd, FILE_MODE)  # O_CREAT's mode is ignored for a file that exists already
    return fd


@overload
def open_append(path: Path, binary: Literal[False] = False) -> TextIO: ...


@overload
def open_append(path: Path, binary: Literal[True]) -> BinaryIO: ...


def open_append(path: Path, binary: bool = False) -> TextIO | BinaryIO:
    """A log opened for appending, line-buffered when text; created owner-only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _fd(path, os.O_WRONLY | os.O_APPEND)
    if binary:
        return os.fdopen(fd, "ab")
    return os.fdopen(fd, "a", encoding="utf-8", buffering=1)


def open_write(path: Path) -> IO[str]:
    """A file opened for writing from empty (the caller renames it into place); owner-only."""
    return os.fdopen(_fd(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8")
