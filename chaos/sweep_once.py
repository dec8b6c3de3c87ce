"""One sweeper invocation in its own process, released at a given instant (see target.sweep_in_subprocesses)."""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.sweep_once")
    parser.add_argument("--at", type=float, required=True, help="wall-clock time to start sweeping")
    args = parser.parse_args(argv)
    from functions import sweeper, wiring

    wiring.engine()  # import and connect before the start line, like a warm Lambda
    delay = args.at - time.time()
    if delay > 0:
        time.sleep(delay)  # waiting for the agreed instant, not for time to pass in the engine
    report = sweeper.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, None)
    report["started_at"] = time.time()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
