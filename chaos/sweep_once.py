"""One sweeper invocation in its own process, released at a given instant (see target.sweep_in_subprocesses)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from functions import sweeper, wiring


def _release(args: argparse.Namespace) -> float:
    """The instant to sweep at: ``--at``, or with ``--go`` the one the caller writes there once
    every process has said it is ready (a start-up slower than a fixed margin cannot miss it)."""
    if not args.go:
        return float(args.at)
    go = Path(args.go)
    Path(f"{go}.ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go from the caller within 120 s")
        time.sleep(0.01)  # waiting for the caller's word, not for time to pass in the engine
    return float(go.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.sweep_once")
    parser.add_argument("--at", type=float, default=0.0, help="wall-clock time to start sweeping")
    parser.add_argument("--go", default="", help="a file the caller writes the start time to, once all are ready")
    parser.add_argument(
        "--for", dest="span", type=float, default=0.0, help="keep sweeping back to back this many seconds after --at"
    )
    args = parser.parse_args(argv)

    engine = wiring.engine()  # import and connect before the start line, like a warm Lambda
    # A first request loads botocore's models and opens the connection (half a second on a busy
    # machine): made here, so that the released sweeps race as warm ones would.
    engine.store.get_execution("chaos-warm-up")
    engine.next_fires()
    at = _release(args)
    delay = at - time.time()
    if delay > 0:
        time.sleep(delay)  # waiting for the agreed instant, not for time to pass in the engine
    event = {"source": "aws.events", "detail-type": "Scheduled Event"}
    began = time.time()  # later than the instant when the start-up took longer: the caller can tell
    report = sweeper.handler(event, None)
    sweeps = 1
    while time.time() < at + args.span:
        # Ticks one after another, as overlapping sweeps arrive around a fire time: counts add up.
        more = sweeper.handler(event, None)
        report = {k: (v + more[k] if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in report.items()}
        sweeps += 1
    report["started_at"] = time.time()
    report["sweeps"] = sweeps
    report["began_at"] = began
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
