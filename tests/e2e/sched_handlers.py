"""A sweeper stand-in for the schedule's tests: slow, failing, and it records each run."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def slow_failing_sweep(event: dict[str, Any], context: Any) -> dict[str, Any]:
    start = time.time()
    time.sleep(float(os.environ["SCHED_SLEEP"]))
    with open(os.environ["SCHED_RECORD"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": event["id"], "start": start, "end": time.time(), "pid": os.getpid()}) + "\n")
    if os.environ.get("SCHED_FAIL") == "1":
        raise RuntimeError("sweep failed, on purpose")
    return {"woken": 0}
