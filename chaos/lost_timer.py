"""Lost timer: the delayed message of a sleeping execution and of a backing-off retry deleted.

Must show: the sweeper wakes each at its ``next_wake_at`` (the sleep's end; the
retry's lease), with no message left to drive it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from chaos import faults
from chaos.invariants import Snapshot
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, PURGE, TIME, Target

NAME = "lost_timer"
FAULT = "delayed wake/retry messages deleted"
# How long each execution may take to reach its wait, and the timers to reach the queue after
# their checkpoints: together shorter than the timers (chaos.workflows.LOST_TIMER_SECONDS).
SEE_WAIT = 60.0
SEE_TIMERS = 5.0


def run(t: Target, r: Result) -> None:
    napper, backer = new_id(NAME, 0), new_id(NAME, 1)
    with Watcher(t, interval=0.1) as w:
        w.add(napper, backer)
        t.start("chaos_lost_nap", {}, napper)
        t.start("chaos_backoff", {"fail_first": 1}, backer)
        waiting = {
            **w.wait([napper], lambda ex: ex.status.value == "SLEEPING", timeout=SEE_WAIT, what="SLEEPING"),
            **w.wait(
                [backer], lambda ex: ex.attempt == 2 and ex.ready_at is not None, timeout=SEE_WAIT, what="a backoff"
            ),
        }
        # A checkpoint is written before its delayed message is sent, so the watcher can see
        # both waits a moment before both timers are in the queue: purge only once they are.
        before = faults.wait_depth(t, lambda d: d.get("Delayed", 0) >= len(waiting), timeout=SEE_TIMERS)
        faults.purge(t)  # the only API that reaches delayed messages
        lost_at = time.time()
        after = faults.queue_depth(t)
        # Both timers are minutes off (the retry's lease two leases past its delay): travel to half a
        # second before the later one, so both fall due within the sweeper's next ticks. The jump
        # moves the functions' clock for both, so the due times are read after it.
        fn_now = t.clock().now()
        skip = max(0.0, max(ex.next_wake_at or fn_now for ex in waiting.values()) - fn_now - 0.5)
        t.advance_time(skip)
        fn_now, wall = t.clock().now(), time.time()
        due_wall = {eid: wall + max(0.0, (ex.next_wake_at or fn_now) - fn_now) for eid, ex in waiting.items()}
        woke = w.wait(
            [napper, backer],
            lambda ex: ex.terminal or ex.current_step > waiting[ex.id].current_step or ex.started_attempt > 0,
            timeout=60,
            what="a wake-up",
        )
        woke_wall = {eid: w.first_seen(eid, _past(waiting[eid].version)) or time.time() for eid in woke}
        w.wait([napper, backer], timeout=60)
        recovered = time.time()
    late = {eid: round(woke_wall[eid] - due_wall[eid], 2) for eid in (napper, backer)}
    r.injected = f"PurgeQueue with {before.get('Delayed', 0)} delayed message(s) (wake + retry) pending"
    r.observed = f"sweeper woke the sleeper {late[napper]:+.1f}s and the retry {late[backer]:+.1f}s from next_wake_at"
    r.recovered(lost_at, recovered)
    r.evidence.update(depth_before=before, depth_after=after, lateness=late, time_travel=skip)
    verify(r, t, w, [napper, backer])
    r.expect(before.get("Delayed", 0) >= len(waiting), f"not every timer was pending to lose: {before}")
    r.expect(after.get("Delayed", 0) == 0, f"delayed messages survived the purge: {after}")
    for eid, v in late.items():
        r.expect(-1.0 <= v <= 6.0, f"{eid} woke {v}s from next_wake_at (sweeper tick is ~1s)")


def _past(version: int) -> Callable[[Snapshot], bool]:
    """A snapshot of a later version than ``version``."""
    return lambda s: s.version > version


SCENARIO = Scenario(NAME, FAULT, (TIME, CHAOS_WORKFLOWS, PURGE), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
