"""Each soak execution's final check: the invariants every execution owes, then its kind's own.

Every kind: ``check_execution`` with the status its plan expects (one commit per step, versions
+1, effects once under their own keys, terminal and out of the due index) and ``check_waits``
(no wait held past the end, one signal per wait). Then, by kind (chaos/soak_mix.py):

- callback: exactly one completion won (a second at the same instant, or a late one, is a 200
  repeat, a 410 or a 409), and the wait committed the winner's body;
- signal: every signal kept, exactly one consumed (the one the wait's commit names);
- map: each item committed once and counted once by the join, its effect landed once, the
  results in item order (chaos/fanout_join.py's ``check_items``);
- child: each child COMPLETED with its own invariants; the parent advanced once past each;
- saga: nothing undone; saga_undone: each committed compensable step undone exactly once,
  in reverse order, nothing undone that never committed;
- composite: all of the above for its map, child and callback, the catch's result when caught,
  and the undo order of chaos/composite_saga.py when it unwinds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chaos.composite_saga import check_undo
from chaos.fanout_join import check_items
from chaos.invariants import Expect, Report, check_compensation, check_execution, check_waits
from chaos.observe import Watcher
from chaos.scenario import Result
from chaos.soak_drive import Answers, callback_body
from chaos.soak_mix import MAP_LINES, Kind, child_ids
from chaos.target import Target
from engine.state import Execution, StepRecord, StepStatus

COMPENSABLE = {"chaos_saga": (0, 1, 2), "order_saga": (0, 1)}  # the steps that declare an undo


@dataclass(frozen=True)
class Read:
    """One execution as the final check read it, once: the kind checks share it."""

    ex: Execution
    history: list[StepRecord]
    entries: dict[str, dict[str, Any]]


Check = Callable[[Target, Read, Any, Answers | None], list[str]]


def _scenario_check(fn: Callable[[Result], Any]) -> list[str]:
    """A scenario's check (it reports into a Result) as a list of violations."""
    r = Result("soak", "")
    fn(r)
    return list(r.violations)


def check_callback(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    ex = seen.ex
    if got is None:
        return ["the soak never answered its callback"]
    out = []
    wins = [a for a in got.sent if a == (200, False)]
    others = [a for a in got.sent if a != (200, False)]
    if len(wins) > 1 or (not wins and not got.ambiguous):
        out.append(f"callback answers {got.sent}: {len(wins)} winning completion(s), expected exactly 1")
    if any(status not in (200, 409, 410) for status, _ in others):
        out.append(f"callback answers other than a 200 repeat, a 409 or a 410: {got.sent}")
    step = int(p.drive["step"])
    record = next((r for r in seen.history if r.index == step and r.status is StepStatus.COMPLETED), None)
    if record is None or record.result != callback_body(ex.id)["result"]:
        out.append(f"the callback step committed {record and record.result}, not the completion's body")
    return out


def check_signal(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    signals = t.store.signals(seen.ex.id)
    taken = [s for s in signals if s.consumed_by is not None]
    sent = [] if got is None else got.sent
    out = []
    if not sent or any(status != 200 for status, _ in sent):
        out.append(f"signals answered {sent}, expected 200 each")
    if len(signals) < len(sent):
        out.append(f"{len(sent)} signal(s) sent, {len(signals)} kept")
    if len(taken) != 1:
        out.append(f"{len(taken)} signal(s) consumed, expected exactly 1")
    return out + check_waits(seen.ex, seen.history, signals)


def check_prices(t: Target, ex: Execution) -> list[str]:
    expected = [{"line": i, "price": i * 10} for i in range(MAP_LINES)]
    prices = ex.context.get("prices")
    out = [] if prices == expected else [f"fan-out results {prices}, expected them in item order"]
    return out + _scenario_check(lambda r: check_items(t, ex.id, r))


def check_map(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    return check_prices(t, seen.ex)


def check_children(t: Target, w: Watcher, kind: Kind, ex: Execution) -> list[str]:
    out = []
    for kid in child_ids(kind, ex.id):
        child = t.get(kid)
        history = t.history(kid)
        report = check_execution(child, history, t.entries(kid), w.trail(kid), Expect(effectful=kind is Kind.CHILD))
        out += [f"child {kid}: {v}" for v in report.violations]
        if child is not None:
            out += [f"child {kid}: {v}" for v in check_waits(child, history, ())]
    return out


def no_undo(history: Sequence[StepRecord], entries: dict[str, dict[str, Any]]) -> list[str]:
    undone = [k for k in entries if k.endswith(":compensate")] + [r.name for r in history if "#compensate" in r.name]
    return [f"a saga that completed undid {undone}"] if undone else []


def check_saga(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    return no_undo(seen.history, seen.entries)


def check_saga_undone(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    ex, history, entries = seen.ex, seen.history, seen.entries
    out = check_compensation(ex, history, entries, COMPENSABLE[p.workflow])
    done = sorted((h for h in history if h.name.endswith("#compensate")), key=lambda h: h.finished_at or 0.0)
    order = [h.index for h in done if h.status is StepStatus.COMPLETED]
    if order != [1, 0]:
        out.append(f"compensations ran {order}, expected charge's then reserve's")
    for index in (0, 1):
        if (entries.get(f"{ex.id}:{index}:compensate") or {}).get("effect") is None:
            out.append(f"the undo of step {index} never landed")
    return out


def check_composite(t: Target, seen: Read, p: Any, got: Answers | None) -> list[str]:
    ex = seen.ex
    out = check_prices(t, ex) + check_callback(t, seen, p, got)
    role = p.drive["role"]
    if role == "caught" and ex.context.get("shipped_by") != "fallback":
        out.append("caught, but the catch's result is not in the context")
    if role == "undone":
        out += _scenario_check(lambda r: check_undo(t, r, ex.id))
    else:
        out += no_undo(seen.history, seen.entries)
    return out


KIND_CHECKS: dict[Kind, Check] = {
    Kind.CALLBACK: check_callback,
    Kind.SIGNAL: check_signal,
    Kind.MAP: check_map,
    Kind.SAGA: check_saga,
    Kind.SAGA_UNDONE: check_saga_undone,
    Kind.COMPOSITE: check_composite,
}


def check_planned(
    t: Target, w: Watcher, eid: str, ex: Execution | None, p: Any, got: Answers | None
) -> tuple[list[str], Report, dict[str, dict[str, Any]]]:
    """Every invariant one planned execution owes, by its kind, on ``ex`` (its item as read at
    the end, None if missing); the report carries its costs."""
    kind = Kind(p.kind)
    history, entries = t.history(eid), t.entries(eid)
    # A parent's child steps commit the child's output, whose effect keys are the child's own.
    expect = Expect(status=p.expect, effectful=kind is not Kind.CHILD)
    report = check_execution(ex, history, entries, w.trail(eid), expect)
    out = list(report.violations)
    if ex is None:
        return out, report, entries
    if kind is not Kind.SIGNAL:
        out += check_waits(ex, history, ())
    if kind in (Kind.CHILD, Kind.COMPOSITE):
        out += check_children(t, w, kind, ex)
    check = KIND_CHECKS.get(kind)
    if check is not None:
        out += check(t, Read(ex, history, entries), p, got)
    return out, report, entries
