"""The control API: start, inspect, list, cancel and re-drive executions."""

from __future__ import annotations

from engine import compensation
from engine import transitions as tr
from engine.errors import (
    InvalidInput,
    NotFailed,
    ParentDecides,
)
from engine.history_rules import last_attempt
from engine.lifecycle import cancel as cancel
from engine.lifecycle import get as get
from engine.lifecycle import start as start
from engine.messages import MessageKind, StepMessage
from engine.outbox import dispatch, execution_log
from engine.parts import Parts
from engine.ports import Page
from engine.state import Execution, Status, StepRecord, StepStatus, WaitKind

CONFLICT_RETRIES = 5


def history(parts: Parts, execution_id: str) -> list[StepRecord]:
    return timeline(parts, execution_id)[1]


def timeline(parts: Parts, execution_id: str) -> tuple[Execution, list[StepRecord]]:
    """The execution and its history, read in that order: a step committed in between is
    then in the history beyond ``current_step``, never missing from both (engine/progress.py)."""
    ex = get(parts, execution_id)
    return ex, compensation.ordered_history(parts.store.history(execution_id))


def list_executions(
    parts: Parts, *, status: str | None = None, workflow: str | None = None, limit: int = 50, cursor: str | None = None
) -> Page:
    """Raises ``InvalidInput`` for an unknown status, a limit outside 1..1000 or a bad cursor."""
    if status is not None and status not in Status.__members__:
        raise InvalidInput(f"status must be one of {sorted(Status.__members__)}")
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000")
    return parts.store.list_executions(status=status, workflow=workflow, limit=limit, cursor=cursor)


def redrive_failed(parts: Parts, execution_id: str) -> Execution:
    """Give a FAILED execution a new round of attempts at the step that failed.

    The message is a guarded ``redrive``: the step's history may say COMPLETED (the
    execution failed after the commit, e.g. on a worker without the workflow), and then
    the execution rolls forward with that result instead of running the step again.

    Raises ``NotFailed`` unless the execution is FAILED, ``UnknownWorkflow`` if this
    deployment does not have its workflow (it would only fail again), ``ParentDecides``
    for a child whose parent no longer waits on it (nothing is written).
    """
    ex = get(parts, execution_id)
    if ex.status is not Status.FAILED:
        raise NotFailed(f"execution {execution_id!r} is {ex.status.value}, not FAILED", status=ex.status.value)
    parts.registry.get(ex.workflow)
    if ex.parent is not None:
        _check_parent_waits(parts, ex)
    new = tr.redriven_state(ex, parts.clock.now(), parts.config)
    parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    execution_log(new).info("execution.redriven")
    message = StepMessage(new.id, new.current_step, new.attempt, MessageKind.REDRIVE)
    dispatch(parts, tr.Effects(run_next=message))
    return new


def _check_parent_waits(parts: Parts, kid: Execution) -> None:
    """A FAILED child may be revived only while its parent still waits on it (its end notice
    not yet taken). Once the parent has taken it, the parent's attempt failed: it retries with
    a fresh child or failed itself, and a revived child would run its work for nobody."""
    parent_id = str(kid.parent.get("id", "")) if kid.parent else ""
    parent = parts.store.get_execution(parent_id)
    if parent is not None and parent_waits_on(parent, kid, _item_record(parts, parent, kid)):
        return
    state = "gone" if parent is None else f"{parent.status.value} at step {parent.current_step}"
    raise ParentDecides(
        f"execution {kid.id!r} is a child of {parent_id!r} ({state}), which no longer waits on it: "
        f"re-drive {parent_id!r} instead (its new attempt starts a fresh child)",
        parent=parent_id,
    )


def _item_record(parts: Parts, parent: Execution, kid: Execution) -> StepRecord | None:
    """The fan-out item record a child item belongs to (None for a plain child, or no record yet)."""
    link = kid.parent or {}
    if "item" not in link or parent.current_step != link.get("step"):
        return None
    join = parts.store.get_join(parent.id, parent.current_step)
    if join is None:
        return None
    return parts.store.get_item(parent.id, parent.current_step, int(link["item"]), join.shards)


def parent_waits_on(parent: Execution, kid: Execution, item: StepRecord | None) -> bool:
    """Pure: ``parent`` still waits on ``kid``. A plain child: the parent's wait names it. A
    fan-out child item: the parent is at that step and attempt and the item has not recorded
    the attempt the child is for (child ids end ``--<step>-<item attempt>-<item>``)."""
    link = kid.parent or {}
    if "item" not in link:
        w = parent.wait
        return parent.status is Status.WAITING and w is not None and w.kind is WaitKind.CHILD and w.child_id == kid.id
    if parent.status is not Status.RUNNING or parent.current_step != link.get("step"):
        return False
    if parent.attempt != link.get("attempt"):
        return False
    item_attempt = int(kid.id.rsplit("--", 1)[-1].split("-")[1])
    final = item is not None and item.status in (StepStatus.COMPLETED, StepStatus.FAILED)
    return not final and last_attempt(item) < item_attempt
