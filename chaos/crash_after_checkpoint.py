"""Crash after checkpoint, before enqueue: the worker dies between the DynamoDB commit and the SQS send.

Must show: the execution stalls (no message drives it), the sweeper finds it
within its lease and re-drives it, and it completes. Uses the one hook inside
the worker (functions/faults.py), enabled by LOOM_CHAOS_CRASH_AFTER_CHECKPOINT.
"""

from __future__ import annotations

import sys
import time

from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CRASH_HOOK, Target

NAME = "crash_after_checkpoint"
FAULT = "worker exits between commit and enqueue"
CRASH_STEP = 3


def run(t: Target, r: Result) -> None:
    eid = new_id(NAME)
    tick = t.sweep_interval
    with Watcher(t, interval=0.1) as w:
        w.add(eid)
        t.start("pipeline", {"chaos": {"crash_after_checkpoint": [CRASH_STEP]}}, eid)
        stalled = w.wait([eid], lambda ex: ex.current_step > CRASH_STEP, timeout=60, what="the checkpoint of step 3")
        stall_version = stalled[eid].version
        lease_due = stalled[eid].next_wake_at
        fn_now = t.clock().now()
        stall_seen = time.time()
        ex = w.wait([eid], timeout=max(60.0, 3 * t.lease + 2 * tick + 30))[eid]
        recovered = time.time()
    trail = w.trail(eid)
    at_stall = [s for s in trail if s.current_step == CRASH_STEP + 1]
    moved = [s for s in trail if s.version > stall_version]
    stall_for = (moved[0].seen_at - stall_seen) if moved else None
    reclaimed = any(s.status == "RUNNING" and s.version == stall_version + 1 for s in at_stall)
    r.injected = f"crash hook at step {CRASH_STEP}: process exit 137 after the commit, before the send"
    r.observed = (
        f"stalled at step {CRASH_STEP + 1} (v{stall_version}) for {stall_for or 0:.1f}s; "
        f"sweeper re-drove it (reclaim v{stall_version + 1}); {ex.status.value}"
    )
    r.recovered(stall_seen, recovered)
    bound = (lease_due - fn_now if lease_due else 2 * t.lease) + 2 * tick + 5
    r.evidence.update(
        stall_version=stall_version,
        stall_seconds=stall_for,
        lease_due_in=lease_due and lease_due - fn_now,
        reclaimed=reclaimed,
        bound=bound,
    )
    (report,) = verify(r, t, w, [eid])
    # A write at the stalled step without advancing it is the sweeper's reclaim (or the start
    # mark of the guarded redrive that follows it); history names neither, so they are extras.
    reclaimed = reclaimed or any(s.version > stall_version for s in at_stall) or report.extra_writes >= 1
    r.evidence["reclaimed"] = reclaimed
    r.expect(stall_for is not None and stall_for > 0.5, "no stall observed: the crash hook did not fire?")
    r.expect(reclaimed, "no sweeper reclaim (a version bump without a step change) was observed")
    r.expect(
        stall_for is None or stall_for <= bound,
        f"the sweeper took {stall_for}s, beyond the lease ({bound:.1f}s)",
    )


SCENARIO = Scenario(NAME, FAULT, (CRASH_HOOK,), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
