"""Overlapping ticks at a fire time: three sweepers sweeping back to back as the nightly report falls due.

Must show: one execution per fire time. The example ``nightly_report`` (cron(0 2 * * ? *))
is due at 02:00 UTC of the functions' clock; the clock is moved to just before it, and three
sweeper processes, once all are warm, are released together half a second before it falls due,
each sweeping back to back for 1.5 s, while the stack's own sweeper ticks too (it ticks when the
clock moves, and every second). Repeated for three nights. The firing's id is the workflow and the fire time, so
every sweep that gets there starts the same execution; the claim on the cursor lets one sweep
fire it, and the others lose the race or find it done.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, verify
from chaos.target import TICK, TIME, Target, sweep_when_ready
from engine.schedule_expr import next_after, parse
from engine.schedule_plan import iso, scheduled_id, scheduled_input

NAME = "schedule_overlap"
FAULT = "three sweepers sweeping back to back (and the stack's own tick) across each fire time"
WORKFLOW = "nightly_report"
EXPRESSION = "cron(0 2 * * ? *)"
NIGHTS = 3
RACERS = 3
LEAD = 0.5  # seconds of the racers' sweeps before the fire time falls due
SPAN = 1.5  # seconds each racer keeps sweeping, back to back


def _night(t: Target, w: Watcher) -> tuple[float, list[dict[str, Any]], float, float]:
    """Bring the next fire time into the racers' sweeps; their reports, when it fell due and
    when they were released."""
    fire = next_after(parse(EXPRESSION), t.clock().now())
    assert fire is not None
    w.add(scheduled_id(WORKFLOW, fire))  # the id is known before the firing: the watcher sees its every version

    def jump(release: float) -> None:
        # The racers are warm and waiting: the fire time falls due LEAD seconds into their sweeps.
        # The stack's own tick on the clock's move comes before it and finds nothing due.
        t.advance_time(fire - t.clock().now() - (release - time.time()) - LEAD)

    release, reports = sweep_when_ready(t, RACERS, span=SPAN, lead=2 * LEAD, before=jump)
    w.wait([scheduled_id(WORKFLOW, fire)], timeout=60)
    return fire, reports, release + LEAD, release


def run(t: Target, r: Result) -> None:
    reports: list[list[dict[str, Any]]] = []
    fires: list[float] = []
    releases: list[float] = []
    with Watcher(t) as w:
        first_due = None
        for _ in range(NIGHTS):
            fire, racers, due_at, release = _night(t, w)
            first_due = first_due or due_at
            fires.append(fire)
            reports.append(racers)
            releases.append(release)
        recovered = time.time()
    ids = [scheduled_id(WORKFLOW, fire) for fire in fires]
    # Counted by input, not by id: an execution for the same fire time under any id is a second one.
    started = [t.get(ex.id) for ex in t.engine.list(workflow=WORKFLOW, limit=1000).items]
    per_fire = {
        iso(fire): sum(1 for ex in started if ex is not None and ex.input == scheduled_input(fire)) for fire in fires
    }
    fired_by_racers = [sum(rep.get("fired", 0) for rep in night) for night in reports]
    cursor = next((c for c in t.store.schedules() if c.workflow == WORKFLOW), None)
    sweeps = [sum(rep.get("sweeps", 1) for rep in night) for night in reports]
    # A racer that began after the fire time (its start-up outlasted READY on a loaded machine)
    # raced nobody; at least two a night must have been sweeping when it fell due.
    on_time = [
        sum(1 for rep in night if rep.get("began_at", float("inf")) < release + LEAD)
        for night, release in zip(reports, releases, strict=True)
    ]
    r.injected = (
        f"{NIGHTS} nights, each: {RACERS} sweeper processes sweeping back to back across the fire time "
        f"({sweeps} sweeps a night, {on_time} racers sweeping at the due instant), beside the stack's own tick"
    )
    r.observed = (
        f"executions per fire time {per_fire}; started by the racers per night {fired_by_racers} "
        f"(the rest by the stack's own tick); cursor pending={None if cursor is None else cursor.pending}"
    )
    r.recovered(first_due or recovered, recovered)
    r.evidence.update(
        ids=ids, racers=reports, per_fire=per_fire, sweeps=sweeps, fired_by_racers=fired_by_racers, on_time=on_time
    )
    verify(r, t, w, ids)
    r.expect(all(n == 1 for n in per_fire.values()), f"executions per fire time {per_fire}, expected one each")
    r.expect(all(n <= 1 for n in fired_by_racers), f"the racers started {fired_by_racers} executions a night")
    r.expect(all(len(night) == RACERS for night in reports), "not every racing sweeper reported")
    r.expect(all(n >= 2 for n in on_time), f"racers sweeping when the fire time fell due, a night: {on_time}")
    r.expect(cursor is not None and cursor.pending is None, f"the cursor still holds a claimed firing: {cursor}")


SCENARIO = Scenario(NAME, FAULT, (TICK, TIME), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
