"""Pause a process and all its descendants as a paused machine would: ``pause_tree.py PID AFTER LENGTH``.

Waits AFTER seconds, SIGSTOPs PID and every descendant (read from /proc), sleeps LENGTH seconds
and SIGCONTs them. It runs as a process of its own, outside the tree it stops.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone, or not readable: not ours to stop
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def main(root: int, after: float, length: float) -> int:
    time.sleep(after)
    # The pauser is often a child of the process it pauses: stopping itself, it would never resume them.
    pids = [pid for pid in descendants(root) if pid != os.getpid()]
    signal_all(pids, signal.SIGSTOP)
    try:
        time.sleep(length)
    finally:
        signal_all(pids, signal.SIGCONT)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])))
