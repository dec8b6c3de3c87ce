"""``loom watch ID`` and ``loom wait ID``: follow an execution until it ends.

Both poll the control plane (the only door into the table) every ``--interval`` seconds.
``watch`` redraws the history when it changed; ``wait`` prints nothing until the end and
tells the final status by its exit code, so that scripts can branch on it:

| exit | meaning                                   |
|------|-------------------------------------------|
| 0    | COMPLETED                                 |
| 1    | an error (the API's message on stderr)    |
| 2    | bad usage                                 |
| 3    | FAILED                                    |
| 4    | CANCELLED                                 |
| 5    | COMPENSATED (the saga was undone)         |
| 6    | COMPENSATION_FAILED                       |
| 7    | --timeout passed before the end           |

The clock and the pause are parameters, so tests move time instead of sleeping.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from loom.cli import output, timeline
from loom.client import ControlPlane

EXIT_BY_STATUS = {"COMPLETED": 0, "FAILED": 3, "CANCELLED": 4, "COMPENSATED": 5, "COMPENSATION_FAILED": 6}
EXIT_TIMEOUT = 7
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: a redraw in place on a terminal


@dataclass
class Pace:
    """Time for the loops: real by default, moved by hand in tests."""

    now: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


PACE = Pace()


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _terminal(status: Any) -> bool:
    return status in EXIT_BY_STATUS


def wait(client: ControlPlane, args: argparse.Namespace, pace: Pace | None = None) -> int:
    pace = pace or PACE
    deadline = None if args.wait_timeout is None else pace.monotonic() + args.wait_timeout
    while True:
        body = client.status(args.id)
        status = body.get("status")
        if _terminal(status):
            if args.json:
                output.as_json(body)
            else:
                print(f"{body.get('id')} {status}")
            return EXIT_BY_STATUS[str(status)]
        if deadline is not None and pace.monotonic() >= deadline:
            sys.stderr.write(f"loom: {args.id} is still {status} after {args.wait_timeout:g}s\n")
            return EXIT_TIMEOUT
        pause = args.interval if deadline is None else max(0.0, min(args.interval, deadline - pace.monotonic()))
        pace.sleep(pause)


# How far the stack's clock may drift from the reader's between two looks before the watch calls
# it a jump (``loom time advance``, ``reset``): more than a slow answer's latency, less than any jump.
JUMP_SECONDS = 5.0


@dataclass
class StackClock:
    """The stack's clock as the watch reads it: the reader's clock plus the skew the last answer's
    ``read_at`` showed. Under local time travel the functions' clock is ahead of the reader's, and
    a countdown must count in theirs, between two answers too."""

    pace: Pace
    skew: float = 0.0
    jumps: int = 0  # how many times the skew moved by more than JUMP_SECONDS

    def observe(self, body: dict[str, Any]) -> None:
        read_at = body.get("read_at_epoch")
        if not isinstance(read_at, (int, float)):
            return  # an older control plane: the reader's clock is all there is
        skew = float(read_at) - self.pace.now()
        if abs(skew - self.skew) > JUMP_SECONDS:
            self.jumps += 1
        self.skew = skew

    def now(self) -> float:
        return self.pace.now() + self.skew

    def note(self) -> str:
        """A line under the page when the stack's clock is not the reader's: why the times differ."""
        if abs(self.skew) <= JUMP_SECONDS:
            return ""
        sign = "+" if self.skew > 0 else "-"
        return f"(the stack's clock is {sign}{timeline.duration(abs(self.skew))} from yours: `loom time show`)\n"


def watch(client: ControlPlane, args: argparse.Namespace, pace: Pace | None = None, out: TextIO | None = None) -> int:
    """Redraw the history when it changes; end when the execution does (exit as ``wait``).
    Times count from the stack's clock (``StackClock``), so a time jump moves every countdown."""
    pace = pace or PACE
    out = out or sys.stdout
    in_place = out.isatty()
    clock = StackClock(pace)
    shown = None
    while True:
        body = client.history(args.id)
        clock.observe(body)
        same = {k: v for k, v in body.items() if not k.startswith("read_at")}  # the clock always moves
        page = timeline.render(same, clock.now(), traceback=args.traceback) + clock.note()
        # A terminal redraws when the text does (its countdowns move); a pipe or a file only
        # gets a new page when the execution changed or the stack's clock jumped, not for
        # every tick of a countdown.
        key = page if in_place else json.dumps([same, clock.jumps], sort_keys=True)
        if key != shown:
            out.write(CLEAR if in_place else ("" if shown is None else "\n"))
            out.write(page)
            out.flush()
            shown = key
        state = timeline.state_of(body)
        kind = str(state.get("kind", ""))
        if kind in timeline.TERMINAL:
            return EXIT_BY_STATUS[kind.upper()]
        if not state:  # an older control plane: ask the execution itself
            status = client.status(args.id).get("status")
            if _terminal(status):
                return EXIT_BY_STATUS[str(status)]
        pace.sleep(args.interval)
