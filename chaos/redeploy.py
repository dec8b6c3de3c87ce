"""A deploy between two steps: the functions are deployed with a changed workflow while an
execution of the old one is parked between its steps, and the old definition comes back later.

Must show: the execution goes BLOCKED (``definition_changed``) instead of running the step now
at its index; nothing runs while it is blocked, a recheck without its definition keeps it there,
nothing goes to the DLQ; once version 1 is deployed again beside version 2 the sweeper's
recheck resumes it and it COMPLETES on version 1, each effect once. ``chaos_redeploy`` v1 is
a, a 20-minute sleep (only the sweeper wakes it), b; v2 inserts audit before b. A "deploy" sets
``LOOM_CHAOS_REDEPLOY`` on every function and replaces every function process; the functions'
clock is moved past the sleep and past each ``blocked_recheck_seconds`` (the stack's sweeper
ticks when it moves).
"""

from __future__ import annotations

import sys
import time

from chaos.faults import dlq_depth
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, REDEPLOY, TICK, TIME, Target
from chaos.workflows import REDEPLOY_VERSIONS
from engine.config import EngineConfig
from engine.definitions import DEFINITION_CHANGED
from engine.state import Execution, Status

NAME = "redeploy"
FAULT = "a deploy inserts a step before b while an execution sleeps between a and b"
WORKFLOW = "chaos_redeploy"
RECHECK = EngineConfig.blocked_recheck_seconds


def _blocked(ex: Execution) -> bool:
    return ex.status is Status.BLOCKED


def _past(t: Target, at: float | None) -> None:
    """Move the functions' clock a second past ``at`` (a wake time on their clock)."""
    t.advance_time(max(0.0, (at or 0.0) - t.clock().now()) + 1.0)


def _trace(t: Target, eid: str) -> dict[str, list[str]]:
    """What has run so far: the ledger's keys and the history's step names."""
    return {"entries": sorted(t.entries(eid)), "history": [h.name for h in t.history(eid)]}


def run(t: Target, r: Result) -> None:
    eid = new_id(NAME)
    dlq_before = dlq_depth(t)
    deploys: list[str] = []
    # The scenario leaves v1 beside v2 deployed, as the fix-up deploy would; a second run on the
    # same stack first puts v1 back alone, or its start would take v2.
    if t.stack.function_env("WorkerFunction").get(REDEPLOY_VERSIONS, "1") != "1":
        t.redeploy({REDEPLOY_VERSIONS: "1"})
    with Watcher(t, interval=0.1) as w:
        w.add(eid)
        t.start(WORKFLOW, {}, eid)
        parked = w.wait([eid], lambda ex: ex.status.value == "SLEEPING", timeout=60, what="the sleep")[eid]
        deployed = time.time()
        t.redeploy({REDEPLOY_VERSIONS: "2"})
        deploys.append("2")
        r.span("fault", "deploy: v2 only", deployed, time.time())
        _past(t, parked.next_wake_at)
        blocked = w.wait([eid], _blocked, timeout=30, what="BLOCKED")[eid]
        at_block = _trace(t, eid)
        # A recheck with only v2 registered: still blocked, its next look pushed off, nothing run.
        _past(t, blocked.next_wake_at)
        rechecked = w.wait(
            [eid], lambda ex: _blocked(ex) and (ex.next_wake_at or 0) > (blocked.next_wake_at or 0), timeout=30
        )[eid]
        at_recheck = _trace(t, eid)
        back = time.time()
        t.redeploy({REDEPLOY_VERSIONS: "1,2"})
        deploys.append("1,2")
        r.span("fault", "deploy: v1 beside v2", back, time.time())
        _past(t, rechecked.next_wake_at)
        w.wait([eid], timeout=30)
        done = time.time()
    ex = t.get(eid)
    entries = t.entries(eid)
    runs = {key.rsplit(":", 1)[-1]: int(row.get("runs", 0)) for key, row in entries.items()}
    dlq_after = dlq_depth(t)
    blocked_trail = [s for s in w.trail(eid) if s.status == "BLOCKED"]
    r.injected = (
        f"deploys {deploys} of {REDEPLOY_VERSIONS} (every function process replaced); "
        f"clock moved past the sleep and past {RECHECK:.0f} s rechecks"
    )
    r.observed = (
        f"BLOCKED ({(blocked.blocked or {}).get('reason')}, from {(blocked.blocked or {}).get('from')}) at step "
        f"{blocked.current_step}; a recheck on v2 alone kept it; after v1 came back {ex.status.value if ex else None} "
        f"on v{ex.workflow_version if ex else None}; step runs {runs}; DLQ {dlq_before} -> {dlq_after}"
    )
    r.recovered(deployed, done)
    r.evidence.update(
        blocked=blocked.blocked,
        at_block=at_block,
        at_recheck=at_recheck,
        runs=runs,
        dlq=[dlq_before, dlq_after],
        blocked_steps=sorted({s.current_step for s in blocked_trail}),
        history=[h.name for h in t.history(eid)],
    )
    verify(r, t, w, [eid])
    reason = (blocked.blocked or {}).get("reason")
    r.expect(reason == DEFINITION_CHANGED, f"blocked with reason {reason!r}, expected {DEFINITION_CHANGED}")
    r.expect(blocked.current_step == 1, f"blocked at step {blocked.current_step}, expected the sleep (1)")
    for when, seen in (("blocked", at_block), ("rechecked", at_recheck)):
        r.expect(seen["entries"] == [f"{eid}:0"], f"ledger when {when}: {seen['entries']}, only a's effect expected")
        r.expect("b" not in seen["history"] and "audit" not in seen["history"], f"history when {when}: {seen}")
    r.expect({s.current_step for s in blocked_trail} == {1}, f"steps while BLOCKED: {r.evidence['blocked_steps']}")
    r.expect(runs == {"0": 1, "2": 1}, f"step runs {runs}, expected a and b once each")
    r.expect(ex is not None and ex.workflow_version == 1, "the execution did not finish on version 1")
    r.expect(r.evidence["history"] == ["a", "park", "b"], f"history {r.evidence['history']}, expected a, park, b")
    r.expect(dlq_after <= dlq_before, f"the DLQ grew from {dlq_before} to {dlq_after}")


SCENARIO = Scenario(NAME, FAULT, (TICK, TIME, CHAOS_WORKFLOWS, REDEPLOY), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
