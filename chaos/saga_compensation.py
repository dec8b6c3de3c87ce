"""Saga compensation: sagas that fail at their last step, undone under duplicates and a killed worker.

Each ``chaos_saga`` commits reserve and charge, then fails for good at ship, so its
compensations run: charge's, then reserve's. While they run, the kit sends copies of
every compensation message it sees, and SIGKILLs the worker of one saga's refund
after the refund landed (its redelivery finds the start mark, the lease lapses, the
sweeper re-drives it, and the retry finds the refund already applied).

Must show: every saga ends COMPENSATED; the compensations ran in reverse order; ship
(which never committed) is never undone; each committed step is undone exactly once
(one committed compensation record, one landed undo under ``<id>:<step>:compensate``).
"""

from __future__ import annotations

import sys
import time

from chaos import faults
from chaos.invariants import Expect, check_compensation
from chaos.observe import Watcher, wait_for
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, KILL, Target

NAME = "saga_compensation"
FAULT = "copies of every compensation message; the worker of one refund SIGKILLed after its effect"
EXECUTIONS = 3
COMPENSABLE = (0, 1, 2)  # the steps of chaos_saga that declare a compensation (ship's never runs)


def run(t: Target, r: Result) -> None:
    ids = [new_id(NAME, i) for i in range(EXECUTIONS)]
    victim = ids[0]
    refund_key = f"{victim}:1:compensate"
    patience = max(90.0, 2.0 * faults.queue_visibility(t) + 4 * t.lease + 30)
    copies = 0
    with Watcher(t, interval=0.1) as w:
        w.add(*ids)
        for eid in ids:
            extra = {"linger_undo": "charge", "linger": 20} if eid == victim else {}
            t.start("chaos_saga", {"amount": 5, **extra}, eid)
        row = wait_for(
            lambda: (t.entries(victim).get(refund_key) or {}).get("effect"),
            timeout=90,
            what="the victim's refund to land",
            poll=0.05,
        )
        killed, what = t.kill_runner(int(row["pid"]), row.get("host"))
        crashed_at = time.time()
        copied: set[tuple[str, int, int]] = set()
        deadline = swept = time.monotonic() + patience
        swept -= patience
        while time.monotonic() < deadline:
            states = [w.latest(eid) for eid in ids]
            for ex in states:
                if ex is not None and ex.status.value == "COMPENSATING":
                    at = (ex.id, ex.current_step, ex.attempt)
                    if at not in copied:
                        copied.add(at)
                        body = faults.step_body(ex.id, ex.current_step, ex.attempt, kind="compensate")
                        copies += faults.send_copies(t, [body], copies=2)
            if all(ex is not None and ex.terminal for ex in states):
                break
            if time.monotonic() - swept > 1.0:
                t.tick_sweeper()  # the killed refund's lease lapses: the sweeper re-drives it
                swept = time.monotonic()
            time.sleep(0.2)
        w.wait(ids, timeout=60)
        recovered = time.time()
    undone: dict[str, list[int]] = {}
    for eid in ids:
        ex = t.get(eid)
        history = t.history(eid)
        entries = t.entries(eid)
        if ex is None:
            r.fail(f"{eid}: gone")
            continue
        for v in check_compensation(ex, history, entries, COMPENSABLE):
            r.fail(f"{eid}: {v}")
        done = [h for h in history if h.name.endswith("#compensate") and h.status.value == "COMPLETED"]
        undone[eid] = [h.index for h in sorted(done, key=lambda h: h.finished_at or 0.0)]  # in the order they ran
        r.expect(undone[eid] == [1, 0], f"{eid}: compensations {undone[eid]}, expected charge then reserve")
        for index in (0, 1):
            landed = (entries.get(f"{eid}:{index}:compensate") or {}).get("effect")
            r.expect(landed is not None, f"{eid}: the undo of step {index} never landed")
        r.expect(f"{eid}:2:compensate" not in entries, f"{eid}: ship never committed, yet its undo ran")
    refund = t.entries(victim).get(refund_key) or {}
    r.injected = f"SIGKILL {what} after the refund landed; {copies} copies of compensation messages"
    r.observed = (
        f"compensations {undone}; the killed refund ran {refund.get('runs')}x, landed once "
        f"({refund.get('duplicates')} duplicate apply refused)"
    )
    r.recovered(crashed_at, recovered)
    r.evidence.update(copies=copies, killed=killed, refund=refund, undone=undone)
    verify(r, t, w, ids, Expect(status="COMPENSATED"))
    r.expect(killed, f"{what} was already gone")
    r.expect(copies > 0, "no compensation message was copied")
    r.expect(int(refund.get("runs", 0)) >= 2, "the killed refund never ran again")


SCENARIO = Scenario(NAME, FAULT, (KILL, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
