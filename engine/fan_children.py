"""Child workflows as fan-out items: ``parallel(child("notify"), ...)``, ``map(run="price_one", ...)``.

Attempt a of item i of fan-out step s of parent P starts the child ``<P>--<s>-<a>-<i>`` (deterministic:
a redelivery finds the child it started instead of starting two) with
``parent = {id, step, attempt, item}``. The item then waits: nothing runs until the child ends
and ``children.notify_parent`` sends P an ITEM message for item i (the sweeper re-sends it if
the child's worker died first, as for a plain child). A COMPLETED child's context is the item's
result; a FAILED or CANCELLED one fails the item's attempt (``ChildFailed``), and the item's
retry policy starts a new child. Cancelling P cancels the children of its started items.
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine.errors import ChildFailed, LoomError
from engine.history_rules import last_attempt
from engine.join import to_resend
from engine.parts import Parts
from engine.state import Execution, Status, StepStatus
from engine.workflow import ChildSpec, StepContext

MAX_EXECUTION_ID = 128
WAITING = object()  # the child is running: the item waits for its end


def item_child_id(parent_id: str, step: int, attempt: int, idx: int) -> str:
    suffix = f"--{step}-{attempt}-{idx}"
    if len(parent_id) + len(suffix) <= MAX_EXECUTION_ID:
        return parent_id + suffix
    return "c" + hashlib.sha256(parent_id.encode()).hexdigest()[:40] + suffix


def await_child(parts: Parts, ex: Execution, cs: ChildSpec, ctx: StepContext) -> Any:
    """The child's context once it COMPLETED, ``WAITING`` while it runs; starts it if need be."""
    from engine import control

    assert ctx.item_index is not None
    cid = item_child_id(ex.id, ex.current_step, ctx.attempt, ctx.item_index)
    kid = parts.store.get_execution(cid)
    if kid is None:
        child_input = cs.fn(ctx)
        if child_input is not None and not isinstance(child_input, dict):
            raise ChildFailed(f"the child's input must be a dict, not {type(child_input).__name__}")
        parent = {"id": ex.id, "step": ex.current_step, "attempt": ex.attempt, "item": ctx.item_index}
        kid, _ = control.start(parts, cs.workflow, child_input or {}, cid, parent=parent)
    if not kid.terminal:
        return WAITING
    if kid.status is Status.COMPLETED:
        return kid.context
    raise ChildFailed(f"child {kid.id} ended {kid.status.value}: {(kid.error or {}).get('message', '')}")


def cancel_items(parts: Parts, ex: Execution) -> None:
    """After P is cancelled at a fan-out step with child items: cancel the children still running."""
    from engine import control
    from engine.fanout_spec import FanoutSpec

    try:
        st = parts.registry.get(ex.workflow).steps[ex.current_step]
    except (LoomError, IndexError):
        return
    if not isinstance(st, FanoutSpec) or not any(isinstance(b, ChildSpec) for b in st.branches):
        return
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return
    records = {r.index: r for r in parts.store.fan_items(ex.id, ex.current_step, join.shards, 0, join.n)}
    final = [i for i, r in records.items() if r.status in (StepStatus.COMPLETED, StepStatus.FAILED)]
    for idx in to_resend(join.n, join.window, final):
        cid = item_child_id(ex.id, ex.current_step, last_attempt(records.get(idx)) + 1, idx)
        try:
            control.cancel(parts, cid)
        except LoomError:
            continue  # never started, or already ended
