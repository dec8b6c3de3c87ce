"""Concurrent sweep and happy path: sweeper ticks forced while messages are in flight, two sweepers at once.

Must show: a sweeper never re-drives what a message is still driving (nothing
runs twice), and when two sweepers find the same due execution one wins its
conditional write and the other no-ops.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, TICK, TIME, Target, sweep_in_subprocesses

NAME = "concurrent_sweep"
FAULT = "forced sweeper ticks + two sweepers at once"
PIPELINES = 3
NAPPERS = 3


def run(t: Target, r: Result) -> None:
    pipes = [new_id(NAME, i) for i in range(PIPELINES)]
    naps = [new_id(f"{NAME}-nap", i) for i in range(NAPPERS)]
    ticks: list[dict[str, Any]] = []
    with Watcher(t) as w:
        w.add(*pipes, *naps)
        # Phase 1: the happy path under a storm of sweeps.
        for eid in pipes:
            t.start("pipeline", {"chaos": {"hold": {f"stage_{k}": 0.2 for k in range(10)}}}, eid)
        stop = threading.Event()

        def storm() -> None:
            while not stop.is_set():
                ticks.append(t.tick_sweeper())
                stop.wait(0.2)

        storm_thread = threading.Thread(target=storm, daemon=True)
        storm_thread.start()
        pair_inflight = sweep_in_subprocesses(t, 2)
        w.wait(pipes, timeout=90)
        stop.set()
        storm_thread.join(timeout=30)
        # Phase 2: sleepers only the sweeper can wake, made due at the instant two sweepers start.
        for eid in naps:
            t.start("chaos_long_nap", {}, eid)
        sleeping = w.wait(naps, lambda ex: ex.status.value == "SLEEPING", timeout=60, what="SLEEPING")
        wake_at = max(ex.next_wake_at or 0 for ex in sleeping.values())
        release = time.time() + 3.0
        holder: dict[str, list[dict[str, Any]]] = {}
        racer = threading.Thread(target=lambda: holder.setdefault("r", sweep_in_subprocesses(t, 2, at=release)))
        racer.start()
        time.sleep(max(0.0, release - 0.4 - time.time()))  # the sleepers fall due just before the release
        t.advance_time(max(0.0, wake_at - t.clock().now()) + 0.1)
        due_at = time.time()
        racer.join(timeout=120)
        pair = holder.get("r", [])
        w.wait(naps, timeout=60)
        recovered = time.time()
    pipe_runs = [row["runs"] for eid in pipes for row in t.entries(eid).values()]
    nap_after = [t.entries(eid).get(f"{eid}:2", {}).get("runs", 0) for eid in naps]
    wakes = [sum(1 for a in t.history(eid)[1].attempts if a.outcome == "completed") for eid in naps]
    redriven_inflight = sum(x.get("redriven", 0) for x in ticks + pair_inflight)
    r.injected = (
        f"{len(ticks)} forced ticks + 2 concurrent sweepers during {PIPELINES} pipelines; "
        f"2 sweepers released together on {NAPPERS} due sleepers"
    )
    r.observed = (
        f"in flight: {redriven_inflight} re-driven, max step runs {max(pipe_runs)}; "
        f"sleepers: sweepers woke {[x.get('woken') for x in pair]}, lost {[x.get('skipped') for x in pair]}; "
        f"each woken {set(wakes)}x"
    )
    r.recovered(due_at, recovered)
    r.evidence.update(
        ticks=len(ticks),
        redriven_inflight=redriven_inflight,
        racing_reports=pair,
        inflight_reports=pair_inflight,
        wakes=wakes,
        after_runs=nap_after,
    )
    verify(r, t, w, pipes + naps)
    r.expect(max(pipe_runs) == 1, f"a step ran {max(pipe_runs)} times while sweepers ticked: something ran twice")
    r.expect(redriven_inflight == 0, f"sweepers re-drove {redriven_inflight} executions that messages still drove")
    r.expect(all(n == 1 for n in wakes), f"sleepers woken {wakes} times, expected once each")
    r.expect(all(n == 1 for n in nap_after), f"the step after the sleep ran {nap_after} times, expected once each")
    r.expect(len(pair) == 2, "the two racing sweepers did not both report")


SCENARIO = Scenario(NAME, FAULT, (TICK, TIME, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
