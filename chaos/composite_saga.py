"""Composite saga: map, child, callback, catch and compensation in one workflow, under worker
kills and duplicate deliveries.

Three ``chaos_composite`` executions: price 6 lines in a map (window 3, each line undoable),
screen the order in a child, wait for a payment callback, charge (undoable), ship (caught),
confirm. ``shipped`` ships; ``caught``'s courier refuses and its catch ships by fallback;
``undone``'s fallback refuses too, so the saga unwinds: charge's refund, then each priced
line from the last to the first. Injected at once:

- the crash hook exits the worker after item 1's commit (``shipped``) and item 2's
  (``undone``), after the child's checkpoint (``shipped``'s child: it dies before telling
  its parent), and after charge's checkpoint (``caught``);
- ``undone``'s refund lingers after its effect and the kit SIGKILLs its worker there;
- a copy of each first-window item message once the join exists, of every message of these
  executions (and their children) a peek sees, and of each compensation message; the event
  source delivers like a standard queue (reordered, some twice);
- each callback is completed from outside twice at once through the control plane, with the
  token read from the provider's inbox (the ledger), never printed.

Must show: ``shipped`` and ``caught`` COMPLETED, ``undone`` COMPENSATED; the map's results in
item order, each item committed once and its effect landed once; each child COMPLETED with
its effect once; one winning completion per callback (the other a 200 repeat); the step after
the callback landed once (confirm, at_least_once, may run twice when a copy races);
``caught`` carries the catch's result; ``undone``'s compensations ran
in reverse order (charge, then lines 5..0), each undo committed once and landed once under
its own key, nothing undone that never committed; every execution terminal and out of the due
index, the step queue drained; no token in the stack's log.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chaos import faults
from chaos.fanout_join import check_items
from chaos.invariants import Expect, check_waits
from chaos.observe import Watcher
from chaos.scenario import SKIP, Result, Scenario, new_id, verify
from chaos.target import CHAOS_WORKFLOWS, CRASH_HOOK, KILL, Target
from engine.messages import MessageKind, StepMessage
from engine.state import StepStatus

NAME = "composite_saga"
FAULT = "crash hook in map items, child and charge; SIGKILL of an undo; copies of every message; doubled callbacks"
LINES = 6
MAP, CHILD, CALLBACK, CHARGE, SHIP, CONFIRM = range(6)
PEEK_COPIES = 40  # each peek is a receive, and SQS dead-letters a message past maxReceiveCount (template.yaml)
KNOBS: dict[str, dict[str, Any]] = {
    "shipped": {"chaos": {"crash_after_item": [1]}, "child_chaos": {"crash_after_checkpoint": [0]}},
    "caught": {"ship": "refuse", "chaos": {"crash_after_checkpoint": [CHARGE]}},
    "undone": {
        "ship": "refuse",
        "fallback": "refuse",
        "chaos": {"crash_after_item": [2]},
        "linger_undo": "charge",
        "linger": 20,
    },
}


def child_of(eid: str) -> str:
    return f"{eid}--{CHILD}-1"


def token_of(t: Target, eid: str) -> str | None:
    row = t.ledger.effects(eid).get(f"{eid}:{CALLBACK}.1") or {}
    token = row.get("callback_token")
    return str(token) if token else None


def complete_twice(t: Target, token: str, eid: str) -> list[tuple[int, dict[str, Any]]]:
    """Two identical completions at the same instant: one wins, the other is a repeat."""
    go = threading.Barrier(2)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def fire() -> None:
        go.wait()
        answer = t.http("POST", f"/callbacks/{token}/succeed", {"result": {"paid": eid[-1]}})
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=fire) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return answers


class Copier:
    """The duplicates: first-window items, whatever a peek sees, each compensation round."""

    def __init__(self, t: Target, ids: list[str]) -> None:
        self.t, self.ids = t, ids
        self.ours = set(ids) | {child_of(eid) for eid in ids}
        self.seen: set[str] = set()
        self.peeked = 0
        self.sent = 0

    def _send(self, bodies: list[str]) -> None:
        fresh = [b for b in bodies if b not in self.seen]
        self.seen.update(fresh)
        self.sent += faults.send_copies(self.t, fresh, copies=1)

    def first_window(self) -> None:
        for eid in self.ids:
            join = self.t.store.get_join(eid, MAP)
            if join is not None:
                n = min(join.window, join.n)
                self._send([StepMessage(eid, MAP, 1, MessageKind.ITEM, i).encode() for i in range(n)])

    def peek(self) -> None:
        if self.peeked >= PEEK_COPIES:
            return
        for m in faults.peek(self.t):
            body = m.get("Body", "")
            try:
                data = json.loads(body)
            except ValueError:
                continue
            if data.get("execution_id") in self.ours and body not in self.seen:
                self.peeked += 1
                self._send([body])

    def compensation(self, states: list[Any]) -> None:
        for ex in states:
            if ex is not None and ex.status.value == "COMPENSATING":  # a fan-out's item undos too
                self._send([faults.step_body(ex.id, ex.current_step, ex.attempt, kind="compensate")])


def drive(t: Target, r: Result, w: Watcher, ids: dict[str, str]) -> dict[str, Any]:
    """Until all are terminal: copies, callbacks completed twice, the undo killed, sweeper ticks."""
    copier = Copier(t, list(ids.values()))
    undone = ids["undone"]
    refund_key = f"{undone}:{CHARGE}:compensate"
    out: dict[str, Any] = {"callbacks": {}, "killed": None, "tokens": []}
    deadline = time.monotonic() + max(150.0, 2.0 * faults.queue_visibility(t) + 8 * t.lease + 60)
    swept = 0.0
    while time.monotonic() < deadline:
        copier.first_window()
        copier.peek()
        states = [w.latest(eid) for eid in ids.values()]
        copier.compensation(states)
        for ex in states:
            if ex is None or ex.id in out["callbacks"]:
                continue
            token = token_of(t, ex.id) if ex.status.value == "WAITING" and ex.current_step == CALLBACK else None
            if token:
                out["tokens"].append(token)
                answers = complete_twice(t, token, ex.id)
                out["callbacks"][ex.id] = [(status, bool(a.get("repeat"))) for status, a in answers]
        row = (t.entries(undone).get(refund_key) or {}) if out["killed"] is None else {}
        if row.get("effect"):
            killed, what = t.kill_runner(int(row["effect"]["pid"]), row["effect"].get("host"))
            out["killed"], out["killed_what"], out["killed_at"] = killed, what, time.time()
        if all(ex is not None and ex.terminal for ex in states):
            break
        if time.monotonic() - swept > 1.0:
            t.tick_sweeper()  # lapsed leases (the crashes, the killed undo) are re-driven
            swept = time.monotonic()
        time.sleep(0.1)
    out.update(copies=copier.sent, peeked=copier.peeked)
    return out


def check_undo(t: Target, r: Result, eid: str) -> list[str]:
    """Reverse order (charge, then lines 5..0), each undo committed once, landed once, own key."""
    history = t.history(eid)
    entries = t.entries(eid)
    undos = [h for h in history if h.name.endswith("#compensate")]
    expected = ["charge#compensate", *(f"prices[{i}]#compensate" for i in reversed(range(LINES)))]
    done = sorted((h for h in undos if h.status is StepStatus.COMPLETED), key=lambda h: h.finished_at or 0.0)
    order = [h.name for h in done]
    r.expect(order == expected, f"{eid}: compensations ran {order}, expected {expected}")
    for h in undos:
        commits = sum(a.outcome.value == "completed" for a in h.attempts)
        r.expect(commits == 1, f"{eid}: {h.name} committed {commits} times")
    keys = [f"{eid}:{CHARGE}:compensate", *(f"{eid}:{MAP}:{i}:compensate" for i in range(LINES))]
    for key in keys:
        row = entries.get(key) or {}
        applied = 1 if row.get("effect") is not None else 0
        runs, dups = int(row.get("runs", 0)), int(row.get("duplicates", 0))
        r.expect(
            applied == 1 and applied + dups <= runs, f"{key}: undo applied {applied} (+{dups} refused) in {runs} runs"
        )
    strays = [k for k in entries if k.endswith(":compensate") and k not in keys]
    r.expect(not strays, f"{eid}: undos of steps that declare none or never committed: {strays}")
    return order


def check_forward(t: Target, r: Result, eid: str, role: str) -> dict[str, Any]:
    ex = t.get(eid)
    if ex is None:
        r.fail(f"{eid}: gone")
        return {}
    prices = ex.context.get("prices")
    expected = [{"line": i, "price": i * 10} for i in range(LINES)]
    r.expect(prices == expected, f"{eid}: results {prices}, expected them in item order")
    items = check_items(t, eid, r)
    kid = t.get(child_of(eid))
    kid_row = t.entries(child_of(eid)).get(f"{child_of(eid)}:0") or {}
    r.expect(kid is not None and kid.status.value == "COMPLETED", f"{eid}: child ended {kid and kid.status.value}")
    r.expect(kid_row.get("effect") is not None, f"{eid}: the child's screen never landed")
    charge = t.entries(eid).get(f"{eid}:{CHARGE}") or {}
    r.expect(int(charge.get("runs", 0)) >= 1 and charge.get("effect") is not None, f"{eid}: charge never landed")
    if role == "caught":
        r.expect(ex.context.get("shipped_by") == "fallback", f"{eid}: the catch's result is not in the context")
        caught = (t.entries(eid).get(f"{eid}:{SHIP}:catch") or {}).get("effect")
        r.expect(caught is not None, f"{eid}: the fallback shipment never landed")
    if role != "undone":
        # confirm is at_least_once: a copy of its message that races the first delivery may run
        # it again (the kit copies every message it sees); the promise is one landed effect.
        confirm = t.entries(eid).get(f"{eid}:{CONFIRM}") or {}
        r.expect(
            int(confirm.get("runs", 0)) >= 1 and confirm.get("effect") is not None,
            f"{eid}: confirm ran {confirm.get('runs')} times and its effect never landed",
        )
    for v in check_waits(ex, t.history(eid), ()):
        r.fail(f"{eid}: {v}")
    return {**items, "child_runs": kid_row.get("runs"), "charge_runs": charge.get("runs")}


def stack_log(t: Target) -> str | None:
    """The stack's log (the functions' lines), None when there is no file to read."""
    log = getattr(getattr(t.stack, "options", None), "log_file", None)
    if not log or not Path(log).exists():
        return None
    return Path(log).read_text(errors="replace")


def crashes_seen(text: str, ids: dict[str, str]) -> list[tuple[str, int]]:
    """(role, step) of each crash hook exit the log shows for these executions."""
    roles = {eid: role for role, eid in ids.items()} | {child_of(eid): f"{role}'s child" for role, eid in ids.items()}
    seen = []
    for line in text.splitlines():
        if '"chaos.crash_after_checkpoint"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("execution_id") in roles:
            seen.append((roles[event["execution_id"]], int(event.get("step", -1))))
    return seen


AIMED = {("shipped", MAP), ("shipped's child", 0), ("caught", CHARGE), ("undone", MAP)}


def run(t: Target, r: Result) -> None:
    if not t.api_url:  # the callbacks are completed from outside, as a provider would: through the API
        r.status, r.reason = SKIP, "no control plane the kit can sign for (the callbacks are completed through it)"
        return
    ids = {role: new_id(NAME, i) for i, role in enumerate(KNOBS)}
    everyone = [*ids.values(), *(child_of(e) for e in ids.values())]
    with Watcher(t, interval=0.1) as w, t.standard_delivery(0.2) as delivery:
        w.add(*everyone)
        started = time.time()
        for role, eid in ids.items():
            t.start("chaos_composite", {"lines": LINES, "amount": 5, **KNOBS[role]}, eid)
        out = drive(t, r, w, ids)
        w.wait(list(ids.values()), timeout=60)
        # A crashed child's hold leaves the due index at the sweeper's next visit.
        w.wait(everyone, lambda ex: ex.terminal and ex.next_wake_at is None, timeout=t.settle_seconds)
        done = time.time()
    depth = faults.wait_drained(t, 30)
    evidence: dict[str, Any] = {role: check_forward(t, r, eid, role) for role, eid in ids.items()}
    order = check_undo(t, r, ids["undone"])
    for eid in ids.values():
        answers = out["callbacks"].get(eid, [])
        wins = [a for a in answers if a == (200, False)]
        r.expect(len(answers) == 2 and len(wins) == 1, f"{eid}: callback answers {answers}, expected one win")
    text = stack_log(t)
    logged = None if text is None else sum(token in text for token in out["tokens"])
    crashes = [] if text is None else crashes_seen(text, ids)
    r.expect(t.stack is None or text is not None, "the kit's stack left no log to look for tokens in")
    r.expect(not logged, f"{logged} callback token(s) reached the stack's log")
    r.expect(text is None or set(crashes) >= AIMED, f"crash hook exits seen {crashes}, aimed at {sorted(AIMED)}")
    r.expect(out["killed"] is True, f"the lingering refund's worker was not killed ({out.get('killed_what')})")
    r.expect(out["copies"] >= 3 * len(ids), f"only {out['copies']} messages were copied")
    r.expect(not sum(depth.values()), f"the step queue did not drain: {depth}")
    refund = t.entries(ids["undone"]).get(f"{ids['undone']}:{CHARGE}:compensate") or {}
    r.injected = (
        f"crash hook after items 1 and 2, a child's checkpoint and charge's; SIGKILL {out.get('killed_what')} "
        f"after the refund landed; {out['copies']} copies ({out['peeked']} from peeks); 2 completions per callback; "
        f"standard delivery {dict(delivery)}"
    )
    r.observed = (
        f"statuses {[t.status_of(e) for e in ids.values()]}; undo order {order}; "
        f"killed refund ran {refund.get('runs')}x, landed once; crash hook exits {crashes}; tokens in log: {logged}"
    )
    r.recovered(out.get("killed_at") or started, done)
    r.evidence.update(
        roles=ids,
        items=evidence,
        undo_order=order,
        callbacks=out["callbacks"],
        copies=out["copies"],
        killed=out["killed"],
        refund=refund,
        tokens_in_log=logged,
        crashes=crashes,
        queue=depth,
        delivery=dict(delivery),
    )
    verify(r, t, w, [ids["shipped"], ids["caught"]])
    verify(r, t, w, [ids["undone"]], Expect(status="COMPENSATED"))
    verify(r, t, w, [child_of(e) for e in ids.values()], Expect(effectful=False))
    r.invariant = (
        f"{len(everyone)} execution(s) checked (3 parents, 3 children): terminal state, 1 commit/step, versions +1, "
        "effects once, none stuck; items once in order; undos once, reversed; one callback win"
        + (f"; {len(r.violations)} violation(s)" if r.violations else "")
    )


SCENARIO = Scenario(NAME, FAULT, (KILL, CRASH_HOOK, CHAOS_WORKFLOWS), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
