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


def watch(client: ControlPlane, args: argparse.Namespace, pace: Pace | None = None, out: TextIO | None = None) -> int:
    """Redraw the history when it changes; end when the execution does (exit as ``wait``)."""
    pace = pace or PACE
    out = out or sys.stdout
    in_place = out.isatty()
    shown = None
    while True:
        body = client.history(args.id)
        page = timeline.render(body, pace.now(), traceback=args.traceback)
        # A terminal redraws when the text does (its countdowns move); a pipe or a file only
        # gets a new page when the execution changed, not for every tick of a countdown.
        same = {k: v for k, v in body.items() if not k.startswith("read_at")}  # the clock always moves
        key = page if in_place else json.dumps(same, sort_keys=True)
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
