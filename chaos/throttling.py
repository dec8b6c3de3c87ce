"""Throttling: DynamoDB and SQS calls failing with throttling errors for a while.

Must show: throttled calls are retried (botocore's backoff, then SQS
redelivery), nothing is lost, every step commits once and every effect lands once.
"""

from __future__ import annotations

import sys
import time

from chaos.observe import Watcher, wait_for
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import THROTTLE, Target

NAME = "throttling"
FAULT = "DynamoDB/SQS throttling errors for a while"
EXECUTIONS = 4
SHARE = 0.4
WINDOW = 8.0


def run(t: Target, r: Result) -> None:
    ids = [new_id(NAME, i) for i in range(EXECUTIONS)]
    proxy = t.proxy
    proxy.throttled.clear()
    with Watcher(t) as w:
        w.add(*ids)
        for eid in ids:
            t.start("pipeline", {"chaos": {"hold": {f"stage_{k}": 0.1 for k in range(10)}}}, eid)
        proxy.throttle(SHARE, WINDOW)
        opened = time.time()
        wait_for(lambda: not proxy.active, timeout=WINDOW + 60, what="the throttling window to close", poll=0.2)
        calm_at = time.time()
        w.wait(ids, timeout=120)
        recovered = time.time()
    counts = dict(proxy.throttled)
    r.injected = f"{SHARE:.0%} of DynamoDB+SQS calls throttled for {WINDOW:.0f}s: {sum(counts.values())} errors"
    r.observed = (
        ", ".join(f"{k.split(':')[1]} x{v}" for k, v in sorted(counts.items())) + "; all retried, all COMPLETED"
    )
    r.span("fault", "throttle window", opened, calm_at)
    r.recovered(calm_at, recovered)
    r.evidence.update(throttled=counts, window_opened=opened, passed=dict(proxy.passed))
    verify(r, t, w, ids)
    r.expect(sum(counts.values()) > 0, "no call was throttled: the functions do not talk through the proxy")
    r.expect(any(k.startswith("dynamodb:") for k in counts), "no DynamoDB call was throttled")
    r.expect(any(k.startswith("sqs:") for k in counts), "no SQS call was throttled")


SCENARIO = Scenario(NAME, FAULT, (THROTTLE,), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
