"""The soak's mixed workload: which kinds of execution it plans, and what end each one expects.

Pure: a seeded ``random.Random`` in, frozen drafts out, so the plan (and its digest) stays a
function of the seed. Each kind names the workflow the chaos stack registers (the examples
and ``chaos.workflows``, the ones the scenarios drive one by one), the status it must end in,
how the soak answers it from outside (``drive``: a callback completed once, twice at once or
again late; a signal sent early, at the wait or in a burst), and which of the input knobs it
can obey: only the examples' steps read ``crash``/``fail`` (``workflows/examples.py``
``_effect``), only a workflow that retries within seconds may take a transient failure, and
the crash hook after a checkpoint aims at any step index (or a fan-out's item).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    CHAIN = "chain"  # pipeline (10 steps) or payment_retry (a retried charge)
    SLEEP = "sleep"  # a 4 s sleep on the stack's clock (chaos_nap)
    CALLBACK = "callback"  # a callback the soak completes from outside (payment_webhook)
    SIGNAL = "signal"  # a signal wait the soak signals (chaos_approval: order_approval with retries)
    MAP = "map"  # a fan-out over 6 items, window 3, then a join that reads them in order
    CHILD = "child"  # a parent waiting on two children (order_with_children)
    SAGA = "saga"  # a saga that completes: nothing undone
    SAGA_UNDONE = "saga_undone"  # a saga made to fail: COMPENSATED, each committed step undone once
    COMPOSITE = "composite"  # map, child, callback, catch and undo in one (chaos_composite)


# Shares of the plan. Chains stay the largest share (the soak's original load); every other
# kind is drawn often enough that 1,000 executions hold dozens of each.
WEIGHTS: tuple[tuple[Kind, float], ...] = (
    (Kind.CHAIN, 0.40),
    (Kind.SLEEP, 0.08),
    (Kind.CALLBACK, 0.10),
    (Kind.SIGNAL, 0.08),
    (Kind.MAP, 0.10),
    (Kind.CHILD, 0.08),
    (Kind.SAGA, 0.06),
    (Kind.SAGA_UNDONE, 0.06),
    (Kind.COMPOSITE, 0.04),
)
CALLBACK_MODES = ("once", "twice", "late")  # twice: two identical completions at the same instant
SIGNAL_MODES = ("early", "at_wait", "burst")  # early: before the wait; burst: two at once at the wait
COMPOSITE_ROLES = {"shipped": "COMPLETED", "caught": "COMPLETED", "undone": "COMPENSATED"}
MAP_LINES = 6  # chaos.fanout_join's shape (its check_items counts on it)
PIPELINE_STEPS = tuple(f"stage_{k}" for k in range(10))


@dataclass(frozen=True)
class Draft:
    """One execution before its knobs: what it runs, what it must end as, how the soak drives it."""

    kind: Kind
    workflow: str
    data: dict[str, Any]
    expect: str = "COMPLETED"
    drive: dict[str, Any] = field(default_factory=dict)
    knob_steps: tuple[str, ...] = ()  # steps that obey crash/fail (the examples' _effect)
    checkpoints: int = 0  # step indices the crash hook may aim at
    transient: bool = False  # retries within seconds: a transient failure is worth planting
    child_knobs: bool = False  # crash knobs go to the children (``child_chaos``)
    items: int = 0  # a fan-out's item count: the crash hook may aim after an item's commit


def draw_kind(rng: random.Random) -> Kind:
    roll, edge = rng.random(), 0.0
    for kind, weight in WEIGHTS:
        edge += weight
        if roll < edge:
            return kind
    return WEIGHTS[-1][0]


def draft(kind: Kind, i: int, rng: random.Random) -> Draft:
    """The execution of ``kind`` numbered ``i``: its workflow, input and expected end."""
    if kind is Kind.CHAIN:
        if rng.random() < 0.8:
            hold = {rng.choice(PIPELINE_STEPS): round(rng.uniform(0.05, 0.3), 2)}
            return Draft(
                kind, "pipeline", {"chaos": {"hold": hold}}, knob_steps=PIPELINE_STEPS, checkpoints=9, transient=True
            )
        data = {"order_id": f"o-{i}", "amount": rng.randint(1, 500), "fail_first": 1}
        return Draft(kind, "payment_retry", data, knob_steps=("reserve_inventory", "notify_customer"), checkpoints=2)
    if kind is Kind.SLEEP:
        return Draft(kind, "chaos_nap", {}, checkpoints=3)
    if kind is Kind.CALLBACK:
        # settle_after 1: the settlement poll after the callback settles at its first check.
        data = {"order_id": f"o-{i}", "amount": rng.randint(1, 500), "settle_after": 1}
        drive = {"callback": rng.choice(CALLBACK_MODES), "step": 1}
        return Draft(
            kind,
            "payment_webhook",
            data,
            drive=drive,
            knob_steps=("reserve_inventory", "notify_customer"),
            checkpoints=4,
        )
    if kind is Kind.SIGNAL:
        steps: tuple[str, ...] = ("reserve_inventory", "ship_order", "notify_customer")
        drive = {"signal": rng.choice(SIGNAL_MODES), "name": "approval", "step": 1}
        return Draft(kind, "chaos_approval", {"order_id": f"o-{i}"}, drive=drive, knob_steps=steps, checkpoints=5)
    if kind is Kind.MAP:
        return Draft(kind, "chaos_fanout", {"lines": MAP_LINES}, checkpoints=2, items=MAP_LINES)
    if kind is Kind.CHILD:
        steps = ("reserve_inventory", "ship_order")  # the children's steps
        return Draft(
            kind, "order_with_children", {"order_id": f"o-{i}"}, knob_steps=steps, checkpoints=3, child_knobs=True
        )
    if kind is Kind.SAGA:
        return Draft(
            kind, "order_saga", {"sku": f"sku-{i}", "amount": rng.randint(1, 500), "courier": "acme"}, checkpoints=3
        )
    if kind is Kind.SAGA_UNDONE:
        if rng.random() < 0.5:
            return Draft(kind, "chaos_saga", {"amount": rng.randint(1, 500)}, expect="COMPENSATED", checkpoints=2)
        data = {"sku": f"sku-{i}", "amount": rng.randint(1, 500)}  # no courier: ship refuses for good
        return Draft(kind, "order_saga", data, expect="COMPENSATED", checkpoints=2)
    role = rng.choice(sorted(COMPOSITE_ROLES))
    data = {"lines": MAP_LINES, "amount": rng.randint(1, 500)}
    data |= {"ship": "refuse"} if role != "shipped" else {}
    data |= {"fallback": "refuse"} if role == "undone" else {}
    drive = {"callback": rng.choice(CALLBACK_MODES), "step": 2, "role": role}
    return Draft(
        kind, "chaos_composite", data, expect=COMPOSITE_ROLES[role], drive=drive, checkpoints=6, items=MAP_LINES
    )


def knobs_for(d: Draft, rng: random.Random) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The input knobs for ``d`` (merged into its ``chaos``/``child_chaos``) and their names.

    About a third of the executions get one, where its kind can obey it."""
    chaos: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.12 and d.knob_steps:
        chaos = {"crash": {rng.choice(d.knob_steps): "once"}, "crash_after_effect": True}
        return ({"child_chaos": chaos} if d.child_knobs else {"chaos": chaos}), ("crash_in_step",)
    if roll < 0.22 and d.checkpoints:
        if d.items and rng.random() < 0.5:
            return {"chaos": {"crash_after_item": [rng.randrange(d.items)]}}, ("crash_after_checkpoint",)
        if d.child_knobs and rng.random() < 0.5:  # the child dies before telling its parent
            return {"child_chaos": {"crash_after_checkpoint": [0]}}, ("crash_after_checkpoint",)
        return {"chaos": {"crash_after_checkpoint": [rng.randrange(d.checkpoints)]}}, ("crash_after_checkpoint",)
    if roll < 0.34 and d.transient:
        return {"chaos": {"fail": {rng.choice(d.knob_steps): 1}}}, ("transient_failure",)
    return {}, ()


def merge_knobs(data: dict[str, Any], knobs: dict[str, Any]) -> dict[str, Any]:
    """The input with the knobs merged into its ``chaos`` and ``child_chaos`` maps."""
    out = dict(data)
    for key, extra in knobs.items():
        out[key] = {**(out.get(key) or {}), **extra}
    return out


def child_ids(kind: Kind, execution_id: str) -> tuple[str, ...]:
    """The children an execution of ``kind`` starts (engine/children.py names them ``<id>--<step>-<attempt>``)."""
    if kind is Kind.CHILD:
        return (f"{execution_id}--0-1", f"{execution_id}--1-1")
    if kind is Kind.COMPOSITE:
        return (f"{execution_id}--1-1",)
    return ()
