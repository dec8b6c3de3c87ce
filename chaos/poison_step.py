"""Poison step: one step that always raises, one that kills its worker on every attempt.

Must show: both end FAILED after max_attempts with the error recorded and a
record in the DLQ; after the downstream is repaired, `loom dlq redrive` (POST
/dlq/redrive) gives them a new round and they complete.
"""

from __future__ import annotations

import sys
import time

from chaos import faults
from chaos.invariants import Expect
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, Target
from chaos.workflows import Poison

NAME = "poison_step"
FAULT = "a step that always raises / always kills its worker"


def _redrive_until(t: Target, wanted: set[str]) -> tuple[set[str], dict[str, int]]:
    """Call the DLQ redrive until it has dealt with ``wanted`` (the DLQ may hold other parked messages)."""
    redriven: set[str] = set()
    summary: dict[str, int] = {}
    for _ in range(20):
        answer = t.redrive_dlq()
        results = answer.get("results") or []
        for res in results:
            summary[res.get("action", "?")] = summary.get(res.get("action", "?"), 0) + 1
            if res.get("execution_id") in wanted and res.get("action") == "redriven" and res.get("kind") == "failed":
                redriven.add(res["execution_id"])
        if wanted <= redriven or not results:
            break
    return redriven, summary


def run(t: Target, r: Result) -> None:
    raiser, killer = new_id(NAME, 0), new_id(NAME, 1)
    max_attempts = Poison.spec.retry.max_attempts  # type: ignore[attr-defined]
    # A worker that dies is only noticed when its attempt's lease runs out (redeliveries
    # within it leave the attempt alone), so the killer needs about two leases per attempt.
    patience = max(120.0, max_attempts * (2 * t.lease + faults.queue_visibility(t)) + 60)
    with Watcher(t) as w:
        w.add(raiser, killer)
        started = time.time()
        t.start("chaos_poison", {}, raiser)
        t.start("chaos_poison", {"poison": "kill"}, killer)
        failed = w.wait([raiser, killer], timeout=patience, what="FAILED")
        failed_at = time.time()
        errors = {eid: (ex.status.value, (ex.error or {}).get("type")) for eid, ex in failed.items()}
        attempts = {eid: len(t.history(eid)[1].attempts) for eid in failed}
        for eid, ex in failed.items():
            r.expect(ex.status.value == "FAILED", f"{eid} ended {ex.status.value}, expected FAILED")
        # The fix: the downstream recovers (the step checks this switch), then the operator redrives.
        for eid in (raiser, killer):
            t.ledger.apply(f"{eid}:fix", {"kind": "fix", "by": "chaos"})
        fixed_at = time.time()
        parked, answer = _redrive_until(t, {raiser, killer})
        done = w.wait([raiser, killer], timeout=60)
        recovered = time.time()
    r.injected = (
        f"downstream raises (1 execution) / os._exit(137) each attempt (1 execution); max_attempts={max_attempts}"
    )
    r.observed = (
        f"both FAILED in {failed_at - started:.0f}s ({errors[raiser][1]}, {errors[killer][1]}) after "
        f"{attempts[raiser]}/{attempts[killer]} attempts; DLQ redrive of {len(parked)} -> "
        + ", ".join(sorted({ex.status.value for ex in done.values()}))
    )
    r.span("fault", "poisoned attempts until FAILED", started, failed_at)
    r.recovered(fixed_at, recovered)
    r.evidence.update(errors=errors, attempts=attempts, dlq=sorted(parked), redrive=answer)
    verify(r, t, w, [raiser, killer], Expect(status="COMPLETED", redrives=1))
    for eid in (raiser, killer):
        r.expect(eid in parked, f"{eid} was not redriven from a 'failed' record in the DLQ")
        r.expect(attempts[eid] == max_attempts, f"{eid} failed after {attempts[eid]} attempts, not {max_attempts}")
    r.expect(errors[raiser][1] == "DownstreamBroken", f"the raiser's recorded error is {errors[raiser][1]}")
    r.expect(errors[killer][1] == "WorkerLost", f"the killer's recorded error is {errors[killer][1]}")


SCENARIO = Scenario(NAME, FAULT, (CHAOS_WORKFLOWS,), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
