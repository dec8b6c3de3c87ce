"""Child workflows as fan-out items: ``parallel(child("notify"), ...)``, ``map(run="price_one", ...)``.

Attempt a of item i of fan-out step s of parent P starts the child ``<P>--<s>-<a>-<i>`` (deterministic:
a redelivery finds the child it started instead of starting two) with
``parent = {id, step, attempt, item}``. The item then waits: nothing runs until the child ends
and ``outbox.notify_parent`` sends P an ITEM message for item i (the sweeper re-sends it if
the child's worker died first, as for a plain child). A COMPLETED child's context is the item's
result; a FAILED or CANCELLED one fails the item's attempt (``ChildFailed``), and the item's
retry policy starts a new child. Cancelling P cancels the children of its started items.
"""

from __future__ import annotations

from typing import Any

from engine.errors import ChildFailed
from engine.lifecycle import cancel_items, item_child_id, start
from engine.parts import Parts
from engine.state import Execution, Status
from engine.workflow import ChildSpec, StepContext

WAITING = object()  # the child is running: the item waits for its end


def await_child(parts: Parts, ex: Execution, cs: ChildSpec, ctx: StepContext) -> Any:
    """The child's context once it COMPLETED, ``WAITING`` while it runs; starts it if need be."""
    assert ctx.item_index is not None
    cid = item_child_id(ex.id, ex.current_step, ctx.attempt, ctx.item_index)
    kid = parts.store.get_execution(cid)
    if kid is None:
        child_input = cs.fn(ctx)
        if child_input is not None and not isinstance(child_input, dict):
            raise ChildFailed(f"the child's input must be a dict, not {type(child_input).__name__}")
        parent = {"id": ex.id, "step": ex.current_step, "attempt": ex.attempt, "item": ctx.item_index}
        kid, _ = start(parts, cs.workflow, child_input or {}, cid, parent=parent)
    if not kid.terminal:
        return WAITING
    if kid.status is Status.COMPLETED:
        return kid.context
    raise ChildFailed(f"child {kid.id} ended {kid.status.value}: {(kid.error or {}).get('message', '')}")


__all__ = ["WAITING", "await_child", "cancel_items", "item_child_id"]
