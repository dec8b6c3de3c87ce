"""Fan-out batch: a map whose failed line ends the batch early, while its worker dies after an
item's commit and every item message the kit sees is delivered twice.

Two ``chaos_fanout_batch`` executions map over 9 lines (window 3, no tolerance); line 1 fails
for good, so once it has failed no new line may start: each slot declines its next line and
the lines already started run to their ends (DESIGN.md "Batch results"). In one, the worker that
commits line 0 exits right after the item's transaction (the crash hook), before it judges
the counts or starts (or declines) line 3. The kit copies each first-window item message once
the join exists, and every later item message a peek sees: a copy that arrives after the
batch stopped exercises the decline on arrival.

Must show: both COMPLETED, the fan-out step committed once; the batch in the context agrees
with the item records (succeeded and failed counted once each, the declined slots counted
once, the reason as the rule gives it), every line that started ran to its end before the
join, no declined line ever ran (no effect under its key), and the step after saw the same
batch (its effect records the reason and the counts).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from chaos.fanout_join import drive_with_copies
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, CRASH_HOOK, Target
from engine.batch_result import key as batch_key
from engine.join import CompletionPolicy
from engine.state import StepStatus

NAME = "fanout_batch"
FAULT = "a failed line stops the batch; worker exits after an item's commit; a copy of every item message"
LINES = 9
REFUSED = 1
CRASH_ITEM = 0
WINDOW = 3  # chaos.workflows.chaos_fanout_batch's max_concurrency
FINAL = (StepStatus.COMPLETED, StepStatus.FAILED)


def check_batch(t: Target, eid: str, context: dict[str, Any], r: Result) -> dict[str, Any]:
    """The batch in the context is the item records' own, and every slot ended once."""
    join = t.store.get_join(eid, 0)
    if join is None:
        r.fail(f"{eid}: no join record")
        return {}
    records = t.store.fan_items(eid, 0, join.shards, 0, join.n)
    by = {s: sorted(rec.index for rec in records if rec.status is s) for s in StepStatus}
    batch = context.get(batch_key("prices")) or {}
    ok, failed, declined = by[StepStatus.COMPLETED], by[StepStatus.FAILED], by[StepStatus.NOT_STARTED]
    r.expect(failed == [REFUSED], f"{eid}: failed lines {failed}")
    r.expect((batch.get("succeeded"), batch.get("failed")) == (len(ok), len(failed)), f"{eid}: batch {batch}")
    reason = CompletionPolicy().reason(join.n, len(ok), len(failed)).value
    r.expect(batch.get("reason") == reason, f"{eid}: reason {batch.get('reason')}, the rule says {reason}")
    r.expect((join.ok, join.failed, join.declined) == (len(ok), len(failed), len(declined)), f"{eid}: {join}")
    r.expect(by[StepStatus.RUNNING] == by[StepStatus.RETRYING] == [], f"{eid}: a line still ran at the join")
    if len(ok) + len(failed) < join.n:
        r.expect(join.ends + join.declined == join.slots, f"{eid}: slots ends={join.ends} declined={join.declined}")
    entries = t.entries(eid)
    for i in declined:
        r.expect(not (entries.get(f"{eid}:0:{i}") or {}).get("effect"), f"{eid}: declined line {i} ran")
    for i in ok:
        r.expect((entries.get(f"{eid}:0:{i}") or {}).get("effect") is not None, f"{eid}: line {i}'s effect lost")
    report = (entries.get(f"{eid}:1") or {}).get("effect") or {}
    seen = (report.get("reason"), report.get("failed"), report.get("not_started"))
    r.expect(seen == (reason, len(failed), join.n - len(ok) - len(failed)), f"{eid}: the next step saw {seen}")
    return {"ok": ok, "failed": failed, "declined": declined, "reason": reason}


def run(t: Target, r: Result) -> None:
    victim, plain = new_id(NAME, 0), new_id(NAME, 1)
    ids = [victim, plain]
    with Watcher(t, interval=0.1) as w:
        w.add(*ids)
        started = time.time()
        chaos = {"crash_after_item": [CRASH_ITEM]}
        t.start("chaos_fanout_batch", {"lines": LINES, "refuse": [REFUSED], "chaos": chaos}, victim)
        t.start("chaos_fanout_batch", {"lines": LINES, "refuse": [REFUSED]}, plain)
        copies = drive_with_copies(t, w, ids)
        done = time.time()
    evidence: dict[str, object] = {}
    for eid in ids:
        ex = t.get(eid)
        if ex is None:
            r.fail(f"{eid}: gone")
            continue
        r.expect(ex.status.value == "COMPLETED", f"{eid}: {ex.status.value}: a failed line must not fail the map")
        commits = [sum(a.outcome.value == "completed" for a in h.attempts) for h in t.history(eid) if h.index == 0]
        r.expect(commits == [1], f"{eid}: the fan-out step committed {commits} times")
        evidence[eid] = check_batch(t, eid, dict(ex.context), r)
    r.injected = f"line {REFUSED} refused; crash hook after line {CRASH_ITEM}'s commit in {victim}; {copies} copies"
    r.observed = f"both {[t.status_of(e) for e in ids]}; {evidence}"
    r.recovered(started, done)
    r.evidence.update(copies=copies, batches=evidence)
    verify(r, t, w, ids)
    r.expect(copies >= WINDOW * len(ids), f"only {copies} item messages were copied: each first window must be")


SCENARIO = Scenario(NAME, FAULT, (CRASH_HOOK, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
