"""Visibility timeout too short: the queue's visibility shortened below a step's run time.

Must show both halves: without the heartbeat (LOOM_HEARTBEAT_SECONDS=0) the
message is delivered again while the step still runs, the step runs twice at
once and exactly one commit wins; with the heartbeat there is no second delivery.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from chaos import faults
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.stackctl import chaos_stack
from chaos.target import NEW_STACK, Target

NAME = "visibility_timeout"
FAULT = "queue visibility shortened below step time"
# The visibility must outlast the poller's batching window (1 s) plus the hand-off to a worker
# process and the first heartbeat (1 s) even on a loaded machine; the held step must outlast
# the visibility by a wide margin and still end inside the worker's Timeout.
SHORT = 4  # seconds of visibility
HOLD = 8.0  # seconds the held step runs (under the chaos stack's 10 s worker Timeout)
HELD_STEP = 1


def _one(t: Target, r: Result, label: str) -> dict[str, Any]:
    eid = new_id(f"{NAME}-{label}")
    with faults.shortened_visibility(t, SHORT) as before, Watcher(t) as w:
        w.add(eid)
        started = time.time()
        t.start("pipeline", {"chaos": {"hold": {f"stage_{HELD_STEP}": HOLD}}}, eid)
        ex = w.wait([eid], timeout=90)[eid]
        took = time.time() - started
    row = t.entries(eid)[f"{eid}:{HELD_STEP}"]
    history = t.history(eid)
    commits = sum(1 for a in history[HELD_STEP].attempts if a.outcome == "completed")
    n_before = len(r.violations)
    verify(r, t, w, [eid])
    return {
        "execution": eid,
        "status": ex.status.value,
        "runs": row["runs"],
        "duplicates": row["duplicates"],
        "commits": commits,
        "visibility_before": before,
        "seconds": round(took, 2),
        "violations": len(r.violations) - n_before,
    }


def run(t: Target, r: Result) -> None:
    # Half one: a stack of its own whose worker never extends visibility. It is always an
    # embedded one: what it shows is the engine's behaviour, and a second stack on a shared
    # LocalStack would take LocalStack down with it when it stops.
    with chaos_stack(heartbeat=0.0, emulator="embedded") as bare:
        without = _one(bare, r, "noheartbeat")
    with_hb = _one(t, r, "heartbeat")
    r.injected = f"VisibilityTimeout={SHORT}s on the step queue; stage_{HELD_STEP} runs {HOLD:.0f}s"
    r.observed = (
        f"no heartbeat: ran {without['runs']}x at once, {without['commits']} commit won; "
        f"heartbeat {t.settings.get('LOOM_HEARTBEAT_SECONDS')}s: ran {with_hb['runs']}x, no second delivery"
    )
    r.recovery_seconds = None
    r.evidence.update(without_heartbeat=without, with_heartbeat=with_hb)
    r.expect(without["runs"] >= 2, f"without the heartbeat the step ran {without['runs']}x: no double run observed")
    r.expect(without["commits"] == 1, f"without the heartbeat {without['commits']} commits, expected exactly 1")
    r.expect(without["duplicates"] >= 1, "the second run's effect was not refused by the ledger")
    r.expect(with_hb["runs"] == 1, f"with the heartbeat the step ran {with_hb['runs']}x: a second delivery happened")
    r.expect(with_hb["commits"] == 1, f"with the heartbeat {with_hb['commits']} commits")


SCENARIO = Scenario(NAME, FAULT, (NEW_STACK,), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
