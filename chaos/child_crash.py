"""Child crash: a child's worker dies right after the child's last checkpoint (before it tells
its parent), and a parent is cancelled while its child still runs.

Must show: the parent still advances, exactly once (the sweeper re-sends the lost notice
from the child's hold in GSI1); a cancelled parent and its running child both end CANCELLED.
"""

from __future__ import annotations

import sys
import time

from chaos.invariants import Expect, check_waits
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, CRASH_HOOK, Target

NAME = "child_crash"
FAULT = "child worker exits after its terminal checkpoint; parent cancelled mid-child"


def run(t: Target, r: Result) -> None:
    parent, cancelled = new_id(NAME, 0), new_id(NAME, 1)
    kids = [f"{parent}--0-1", f"{parent}--1-1"]
    running_kid = f"{cancelled}--0-1"
    with Watcher(t, interval=0.1) as w:
        w.add(parent, cancelled, *kids, running_kid)
        first = time.time()
        t.start("order_with_children", {"order_id": "c", "child_chaos": {"crash_after_checkpoint": [0]}}, parent)
        t.start("order_with_children", {"order_id": "x", "child_chaos": {"hold": {"reserve_inventory": 3}}}, cancelled)
        w.wait([running_kid], lambda ex: ex.status.value == "RUNNING", timeout=60, what="the child to run")
        t.http("POST", f"/executions/{cancelled}/cancel")
        w.wait([parent, cancelled, running_kid], timeout=max(90.0, 4 * t.lease + 30))
        # The crashed children's holds leave GSI1 at the sweeper's next visit; a child whose
        # parent was still waiting when it was swept stays due up to a patience (target.settle_seconds).
        w.wait(kids, lambda ex: ex.terminal and ex.next_wake_at is None, timeout=t.settle_seconds)
        done = time.time()
    statuses = {eid: t.status_of(eid) for eid in [parent, cancelled, running_kid]}
    runs = (t.entries(parent).get(f"{parent}:2") or {}).get("runs", 0)
    r.expect(statuses[parent] == "COMPLETED", f"the parent ended {statuses[parent]}")
    r.expect(runs == 1, f"the parent's step after its children ran {runs} times, expected once")
    r.expect(
        statuses[cancelled] == "CANCELLED" and statuses[running_kid] == "CANCELLED",
        f"cancelled parent and child ended {statuses[cancelled]} / {statuses[running_kid]}",
    )
    for eid in [parent, cancelled, *kids, running_kid]:
        ex = t.get(eid)
        if ex is not None:
            for v in check_waits(ex, t.history(eid), ()):
                r.fail(f"{eid}: {v}")
    r.injected = "crash hook after each child's last checkpoint; cancel of a parent whose child holds 3 s"
    pair = f"{statuses[cancelled]}/{statuses[running_kid]}"
    r.observed = f"parent {statuses[parent]} (next step ran {runs}x); cancelled pair {pair}"
    r.recovered(first, done)
    r.evidence.update(statuses=statuses, after_children_runs=runs)
    # A parent's child steps commit the child's output, whose effect keys are the child's own.
    verify(r, t, w, kids)
    verify(r, t, w, [parent], Expect(effectful=False))
    verify(r, t, w, [cancelled, running_kid], Expect(status="CANCELLED", effectful=False))


SCENARIO = Scenario(NAME, FAULT, (CRASH_HOOK, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
