"""Crash mid-step: the worker process SIGKILLed while a step runs, after its side effect.

Must show: the step re-runs on redelivery with the same idempotency key, and the
idempotent side effect lands once (ledger: runs == 2, duplicates == 1).
"""

from __future__ import annotations

import sys
import time

from chaos import faults
from chaos.observe import Watcher, wait_for
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, KILL, Target

NAME = "crash_mid_step"
FAULT = "worker SIGKILLed by pid mid-step, after its effect"


def run(t: Target, r: Result) -> None:
    eid = new_id(NAME)
    key = f"{eid}:1"
    local = not t.docker_kill  # the workers are processes here (else Lambda containers in LocalStack)
    # The redelivery comes after the queue's visibility timeout (short on the kit's stack).
    patience = max(60.0, 2.0 * faults.queue_visibility(t) + 30)
    pids_before = set(t.worker_pids()) if local else set()
    with Watcher(t) as w:
        w.add(eid)
        t.start("chaos_crash_window", {"amount": 42, "linger": 25}, eid)
        row = wait_for(
            lambda: (t.entries(eid).get(key) or {}).get("effect"), timeout=60, what="the charge to land", poll=0.05
        )
        pid = int(row["pid"])
        killed, what = t.kill_runner(pid, row.get("host"))
        crashed_at = time.time()
        ex = w.wait([eid], timeout=patience)[eid]
        recovered = time.time()
        pids_after = (
            set(
                wait_for(
                    lambda: t.worker_pids() if pid not in t.worker_pids() else None,
                    timeout=30,
                    what="the pool to replace the killed worker",
                )
            )
            if local
            else set()
        )
    entry = t.entries(eid)[key]
    r.injected = f"SIGKILL {what} while charge_then_linger slept after landing its charge"
    r.observed = (
        f"{ex.status.value}; charge ran {entry['runs']}x under {key}, landed once "
        f"({entry['duplicates']} duplicate apply refused)" + ("; pool replaced the worker" if local else "")
    )
    r.recovered(crashed_at, recovered)
    r.evidence.update(
        pid=pid, killed=killed, ledger=entry, pids_before=sorted(pids_before), pids_after=sorted(pids_after)
    )
    verify(r, t, w, [eid])
    r.expect(killed, f"{what} was already gone")
    if local:
        r.expect(pid in pids_before, f"pid {pid} is not one of the stack's workers {sorted(pids_before)}")
    r.expect(entry["runs"] == 2, f"the step ran {entry['runs']} times, expected 2 (once killed, once redelivered)")
    r.expect(entry["duplicates"] == 1, f"{entry['duplicates']} duplicate applies, expected 1")
    r.expect(entry["effect"] is not None and entry["effect"].get("run") == 1, "the effect is not the first run's")


SCENARIO = Scenario(NAME, FAULT, (KILL, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
