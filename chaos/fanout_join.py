"""Fan-out join: a map's worker dies between an item's commit and the join, while every item
message the kit sees is delivered twice.

Two ``chaos_fanout`` executions map over 6 lines (window 3). In one, the worker that commits
item 1 exits right after the item's transaction (the crash hook, ``crash_after_item``), before
it judges the counts or starts item 4; its message comes back after the visibility timeout (or
the sweeper re-drives the parent once its lease lapses). As soon as an execution's join record
exists, the kit sends a copy of the ITEM message of each item of the first window (those are
started when the fan-out opens, so the copy is a real duplicate, never an early start), and a copy
of every later ITEM message a peek at the queue sees. Building the first copies instead of only
peeking makes the fault certain: the workers often take an item message before any peek sees it.

Must show: both COMPLETED; exactly one advance past the fan-out (one committed record of the
step, one join decision); the results in item order; each item committed once (one completed
attempt per item record, counted once on the join record) and its effect landed once under
``<id>:0:<item>``.
"""

from __future__ import annotations

import json
import sys
import time

from chaos import faults
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, CRASH_HOOK, Target
from engine.messages import MessageKind, StepMessage

NAME = "fanout_join"
FAULT = "worker exits after an item's commit, before the join; a copy of every item message"
LINES = 6
CRASH_ITEM = 1
WINDOW = 3  # chaos.workflows.chaos_fanout's max_concurrency


def copy_first_window(t: Target, ids: list[str], copied: set[str]) -> int:
    """A copy of each first-window item's message, once per execution, once its join exists."""
    sent = 0
    for eid in ids:
        join = t.store.get_join(eid, 0)
        if join is None:
            continue
        bodies = [StepMessage(eid, 0, 1, MessageKind.ITEM, i).encode() for i in range(min(join.window, join.n))]
        fresh = [b for b in bodies if b not in copied]
        copied.update(fresh)
        sent += faults.send_copies(t, fresh, copies=1)
    return sent


def copy_items(t: Target, ids: list[str], copied: set[str]) -> int:
    sent = 0
    for m in faults.peek(t):
        body = m.get("Body", "")
        try:
            data = json.loads(body)
        except ValueError:
            continue
        if data.get("kind") == "item" and data.get("execution_id") in ids and body not in copied:
            copied.add(body)
            sent += faults.send_copies(t, [body], copies=1)
    return sent


def drive_with_copies(t: Target, w: Watcher, ids: list[str]) -> int:
    """Until every execution ends: copy the item messages (the first windows, then what a peek
    sees) and tick the sweeper once a second. The number of copies sent."""
    copied: set[str] = set()
    copies = 0
    deadline = swept = time.monotonic() + max(60.0, 4 * t.lease + 30)
    swept -= 1e9
    while time.monotonic() < deadline:
        copies += copy_first_window(t, ids, copied) + copy_items(t, ids, copied)
        states = [w.latest(eid) for eid in ids]
        if all(ex is not None and ex.terminal for ex in states):
            break
        if time.monotonic() - swept > 1.0:
            t.tick_sweeper()
            swept = time.monotonic()
        time.sleep(0.1)
    w.wait(ids, timeout=30)
    return copies


def check_items(t: Target, eid: str, r: Result) -> dict[str, int]:
    """Each item committed once and counted once; its effect landed once under its own key."""
    join = t.store.get_join(eid, 0)
    if join is None:
        r.fail(f"{eid}: no join record")
        return {}
    records = t.store.fan_items(eid, 0, join.shards, 0, join.n)
    completed = [sum(a.outcome.value == "completed" for a in rec.attempts) for rec in records]
    r.expect(len(records) == LINES and completed == [1] * LINES, f"{eid}: item commits {completed}")
    r.expect(join.ok == LINES and join.failed == 0, f"{eid}: join counted ok={join.ok} failed={join.failed}")
    r.expect(join.decided == "SUCCEEDED", f"{eid}: join decided {join.decided}")
    entries = t.entries(eid)
    for i in range(LINES):
        row = entries.get(f"{eid}:0:{i}") or {}
        r.expect(row.get("effect") is not None, f"{eid}: item {i}'s effect never landed")
    runs = sum(int((entries.get(f"{eid}:0:{i}") or {}).get("runs", 0)) for i in range(LINES))
    return {"item_runs": runs, "ok": join.ok}


def run(t: Target, r: Result) -> None:
    victim, plain = new_id(NAME, 0), new_id(NAME, 1)
    ids = [victim, plain]
    with Watcher(t, interval=0.1) as w:
        w.add(*ids)
        started = time.time()
        t.start("chaos_fanout", {"lines": LINES, "chaos": {"crash_after_item": [CRASH_ITEM]}}, victim)
        t.start("chaos_fanout", {"lines": LINES}, plain)
        copies = drive_with_copies(t, w, ids)
        done = time.time()
    evidence: dict[str, object] = {}
    for eid in ids:
        ex = t.get(eid)
        if ex is None:
            r.fail(f"{eid}: gone")
            continue
        prices = ex.context.get("prices")
        expected = [{"line": i, "price": i * 10} for i in range(LINES)]
        r.expect(prices == expected, f"{eid}: results {prices}, expected them in item order")
        joins = [h for h in t.history(eid) if h.index == 0]
        commits = [sum(a.outcome.value == "completed" for a in h.attempts) for h in joins]
        r.expect(commits == [1], f"{eid}: the fan-out step committed {commits} times: the join must be one")
        trail = w.trail(eid)
        advanced = sorted({s.version for s in trail if s.current_step == 1})
        ended = min((s.seen_at for s in trail if s.status == "COMPLETED"), default=done)
        timeline = [(round(s.seen_at - started, 1), s.version, s.current_step) for s in trail]
        evidence[eid] = {
            **check_items(t, eid, r),
            "versions_at_step_1": advanced,
            "seconds": round(ended - started, 1),
            "timeline": timeline,
        }
    r.injected = f"crash hook after item {CRASH_ITEM}'s commit in {victim}; {copies} copies of item messages"
    r.observed = f"both {[t.status_of(e) for e in ids]}; {evidence}"
    r.recovered(started, done)  # the crash lands in the first window: the whole run is its recovery
    r.evidence.update(copies=copies, items=evidence)
    verify(r, t, w, ids)
    r.expect(copies >= WINDOW * len(ids), f"only {copies} item messages were copied: each first window must be")


SCENARIO = Scenario(NAME, FAULT, (CRASH_HOOK, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
