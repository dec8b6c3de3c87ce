"""Duplicate delivery: copies of in-flight step messages, some at the same moment as the original.

Must show: each step committed once; the duplicates no-op (a copy that lands
while its step still runs may run the body again, but its commit loses and the
idempotent effect lands once).

On the kit's own stack the event source also delivers like a standard queue for
the whole scenario (shuffled batches, some messages held back, some delivered
twice with the same MessageId): the duplicates SQS itself makes, next to the
copies the scenario sends.
"""

from __future__ import annotations

import sys
import time

from chaos import faults
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import Target

NAME = "duplicate_delivery"
FAULT = "copies of in-flight step messages sent to the queue"
EXECUTIONS = 3
STEPS = 10
PEEKED_COPIES = 40
STANDARD_RATE = 0.25  # of messages held back, and of deliveries repeated, by the local event source


def run(t: Target, r: Result) -> None:
    ids = [new_id(NAME, i) for i in range(EXECUTIONS)]
    hold = {f"stage_{k}": 0.25 for k in range(STEPS)}
    copies_at_start = copies_peeked = copies_by_step = 0
    with t.standard_delivery(STANDARD_RATE) as delivery, Watcher(t) as w:
        w.add(*ids)
        for eid in ids:
            t.start("pipeline", {"chaos": {"hold": hold}}, eid)
        # The same moment as the original: three copies of every first message, in one batch.
        copies_at_start = faults.send_copies(t, [faults.step_body(eid, 0) for eid in ids], copies=3)
        first_fault = time.time()
        copied: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # Each peek is a receive: it raises the receive count of what it sees, and SQS
            # parks a message received maxReceiveCount times. So peek only while copying.
            if copies_peeked < PEEKED_COPIES:
                for msg in faults.peek(t):
                    copies_peeked += faults.send_copies(t, [msg["Body"]], copies=2)
            states = [w.latest(eid) for eid in ids]
            for ex in states:
                if ex is not None and not ex.terminal and (ex.id, ex.current_step) not in copied:
                    copied.add((ex.id, ex.current_step))
                    copies_by_step += faults.send_copies(
                        t, [faults.step_body(ex.id, ex.current_step, ex.attempt)], copies=1
                    )
            if all(ex is not None and ex.terminal for ex in states):
                break
            time.sleep(0.1)
        w.wait(ids, timeout=60)
        recovered = time.time()
        depth = faults.wait_drained(t, 30)
    total = copies_at_start + copies_peeked + copies_by_step
    ledgers = [t.entries(eid) for eid in ids]
    extra_runs = sum(max(0, row["runs"] - 1) for led in ledgers for row in led.values())
    effects = sum(1 for led in ledgers for row in led.values() if row["effect"] is not None)
    r.injected = (
        f"{total} copies ({copies_at_start} with the originals, {copies_peeked} peeked, {copies_by_step} rebuilt)"
    )
    r.observed = (
        f"{EXECUTIONS}x{STEPS} steps committed once; {effects} effects; "
        f"{total - extra_runs} copies no-op'd as stale, {extra_runs} re-ran a step whose commit lost"
    )
    r.recovered(first_fault, recovered)
    r.evidence.update(
        copies=total, extra_body_runs=extra_runs, effects=effects, queue_after=depth, standard_delivery=delivery
    )
    if delivery["mode"] == "local-esm":
        r.injected += (
            f"; standard-queue delivery: {delivery.get('duplicated', 0)} redelivered, "
            f"{delivery.get('held', 0)} held back, {delivery.get('reordered', 0)} batches reordered"
        )
        r.expect(delivery.get("duplicated", 0) > 0, "the event source delivered no message twice")
        r.expect(delivery.get("reordered", 0) + delivery.get("held", 0) > 0, "the event source never reordered")
    verify(r, t, w, ids)
    r.expect(effects == EXECUTIONS * STEPS, f"{effects} effects landed, expected {EXECUTIONS * STEPS}")
    r.expect(total > 0, "no duplicate was injected")
    r.expect(not any(depth.values()), f"copies still circulating in the queue: {depth}")


SCENARIO = Scenario(NAME, FAULT, (), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
