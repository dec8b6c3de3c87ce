"""Signal race: signals sent before the wait, in concurrent bursts, and to a finished execution.

Must show: each wait consumes exactly one signal, the one its history names; the extra
signals stay kept and unconsumed; a signal to a terminal execution is refused (409) and
nothing is written.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from chaos.invariants import check_waits
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import Target

NAME = "signal_race"
FAULT = "signal bursts before and at the wait; a signal after the end"
BURST = 4


def burst(t: Target, eid: str) -> list[tuple[int, dict[str, Any]]]:
    barrier = threading.Barrier(BURST)
    answers: list[tuple[int, dict[str, Any]]] = []

    def fire(i: int) -> None:
        barrier.wait()
        answers.append(t.http("POST", f"/executions/{eid}/signals/approval", {"payload": {"approved": True, "n": i}}))

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(BURST)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return answers


def run(t: Target, r: Result) -> None:
    early, at_wait = new_id(NAME, 0), new_id(NAME, 1)
    with Watcher(t, interval=0.1) as w:
        w.add(early, at_wait)
        t.start("order_approval", {"order_id": "early"}, early)
        first = time.time()
        answers = burst(t, early)  # most land before the execution reaches its wait
        t.start("order_approval", {"order_id": "at-wait"}, at_wait)
        w.wait([at_wait], lambda ex: ex.status.value == "WAITING", timeout=60, what="WAITING")
        answers += burst(t, at_wait)
        w.wait([early, at_wait], timeout=120)
        done = time.time()
        before = len(t.store.signals(at_wait))
        late = t.http("POST", f"/executions/{at_wait}/signals/approval", {"payload": {"approved": True}})
        after = len(t.store.signals(at_wait))
    r.expect(all(status == 200 for status, _ in answers), f"a signal was not kept: {[s for s, _ in answers]}")
    r.expect(late[0] == 409, f"a signal to a COMPLETED execution answered {late[0]}, expected 409")
    r.expect(after == before, f"the refused signal was written ({before} -> {after} signals)")
    consumed = {}
    for eid in (early, at_wait):
        ex = t.get(eid)
        assert ex is not None
        signals = t.store.signals(eid)
        taken = [s for s in signals if s.consumed_by is not None]
        consumed[eid] = {"kept": len(signals), "consumed": len(taken)}
        r.expect(len(signals) == BURST, f"{eid}: {len(signals)} signals kept, expected {BURST}")
        r.expect(len(taken) == 1, f"{eid}: {len(taken)} signals consumed, expected exactly 1")
        for v in check_waits(ex, t.history(eid), signals):
            r.fail(f"{eid}: {v}")
    r.injected = f"2 bursts of {BURST} concurrent signals (one before the wait), 1 after the end"
    r.observed = f"one consumed per wait, {BURST - 1} kept each; the late one refused 409 with nothing written"
    r.recovered(first, done)
    r.evidence.update(signals=consumed, late_status=late[0])
    verify(r, t, w, [early, at_wait])


SCENARIO = Scenario(NAME, FAULT, (), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
