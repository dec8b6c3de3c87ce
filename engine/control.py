"""The control API: start, inspect, list, cancel and re-drive executions."""

from __future__ import annotations

import json
import uuid
from typing import Any

from engine import children, compensation
from engine import transitions as tr
from engine.errors import (
    AlreadyTerminal,
    ConflictError,
    ExecutionAlreadyExists,
    ExecutionNotFound,
    InvalidInput,
    NotFailed,
)
from engine.limits import check_execution_id, check_item, meta_item_size
from engine.messages import MessageKind, StepMessage
from engine.outbox import dispatch, execution_log, notify_parent
from engine.parts import Parts
from engine.ports import Page
from engine.state import Execution, Status, StepRecord, canonical_json

CONFLICT_RETRIES = 5


def start(
    parts: Parts,
    workflow: str,
    input: Any,
    execution_id: str | None = None,
    *,
    parent: dict[str, Any] | None = None,
) -> tuple[Execution, bool]:
    """Start an execution; idempotent on ``execution_id``. Returns (execution, created).

    ``parent`` ({id, step, attempt}) makes it a child (engine/children.py).

    Raises ``UnknownWorkflow``, ``InvalidInput`` (and its ``PayloadTooLarge``),
    ``ExecutionAlreadyExists`` when the id is taken with another workflow or input.
    """
    spec = parts.registry.get(workflow)
    if execution_id is None:
        execution_id = uuid.uuid4().hex
    check_execution_id(execution_id)
    input_json = _input_json(input)
    check_item(meta_item_size(input_json, input_json), "the input")
    now = parts.clock.now()
    document = json.loads(input_json)
    draft = Execution(
        id=execution_id,
        workflow=workflow,
        status=Status.RUNNING,
        current_step=0,
        version=1,
        input=document,
        context=dict(document),
        created_at=now,
        updated_at=now,
        parent=parent,
    )
    ex, effects = tr.start_state(draft, spec, parts.config)
    try:
        parts.store.create_execution(ex)
    except ConflictError as exc:
        # The conflict carries the item that is there (a lost answer of our own create is not a conflict).
        existing = exc.current if isinstance(exc.current, Execution) else parts.store.get_execution(execution_id)
        if existing is None:  # deleted in between; let the caller retry
            raise
        if existing.workflow != workflow or canonical_json(existing.input) != input_json:
            raise ExecutionAlreadyExists(
                f"execution {execution_id!r} exists with a different workflow or input",
                execution_id=execution_id,
            ) from exc
        return existing, False
    execution_log(ex).info("execution.started", workflow=workflow)
    dispatch(parts, effects)
    return ex, True


def _input_json(input: Any) -> str:
    if input is None:
        input = {}
    if not isinstance(input, dict):
        raise InvalidInput("input must be a JSON object")
    try:
        return canonical_json(input)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"input is not JSON-serialisable: {exc}") from exc


def get(parts: Parts, execution_id: str) -> Execution:
    """Raises ``InvalidExecutionId`` or ``ExecutionNotFound``."""
    check_execution_id(execution_id)
    ex = parts.store.get_execution(execution_id)
    if ex is None:
        raise ExecutionNotFound(f"no execution {execution_id!r}", execution_id=execution_id)
    return ex


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


def cancel(parts: Parts, execution_id: str, *, compensate: bool = False) -> Execution:
    """Raises ``AlreadyTerminal``, or ``ConflictError`` if the execution kept changing.

    ``compensate``: a saga's committed steps are undone first (COMPENSATING, see
    engine/compensation.py); a workflow with nothing to undo is simply cancelled.
    """
    ex = get(parts, execution_id)
    for _ in range(CONFLICT_RETRIES):
        if ex.terminal or (compensate and ex.status is Status.COMPENSATING):
            if ex.status is Status.CANCELLED:
                # A repeated cancel finishes a cascade that a crash cut short (engine/children.py).
                children.cancel_running_children(parts, ex)
            raise AlreadyTerminal(f"execution {execution_id!r} is already {ex.status.value}", status=ex.status.value)
        if ex.status is Status.COMPENSATING:
            # Stopping an undo half way would leave the saga inconsistent: let it finish.
            raise AlreadyTerminal(f"execution {execution_id!r} is compensating", status=ex.status.value)
        first = compensation.first_to_undo(parts, ex) if compensate else None
        if first is not None:
            cause: dict[str, Any] = {"type": "Cancelled", "message": "cancelled with compensate", "reason": "cancelled"}
            # ``at``: the cancel's time, which the history shows as its own entry (engine/progress.py).
            cause.update(step=ex.current_step, attempt=ex.attempt, at=parts.clock.now())
            new, effects = tr.compensating_state(ex, first, cause, parts.clock.now(), parts.config)
        else:
            new, effects = tr.cancelled_state(ex, parts.clock.now(), parts.config), tr.Effects()
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except ConflictError as exc:
            ex = exc.current if isinstance(exc.current, Execution) else get(parts, execution_id)
            continue
        if first is not None:
            execution_log(new).warning("compensation.started", cause=new.error, first_step=first)
            dispatch(parts, effects)
        else:
            execution_log(new).info("execution.cancelled")
        # Parent first, then its child: the child's end then finds the parent terminal and
        # changes nothing (the other order would let the parent retry with a new child).
        children.cancel_children(parts, ex)
        notify_parent(parts, new)
        return new
    raise ConflictError(f"execution {execution_id!r} kept changing; try again")


def redrive_failed(parts: Parts, execution_id: str) -> Execution:
    """Give a FAILED execution a new round of attempts at the step that failed.

    The message is a guarded ``redrive``: the step's history may say COMPLETED (the
    execution failed after the commit, e.g. on a worker without the workflow), and then
    the execution rolls forward with that result instead of running the step again.

    Raises ``NotFailed`` unless the execution is FAILED, ``UnknownWorkflow`` if this
    deployment does not have its workflow (it would only fail again).
    """
    ex = get(parts, execution_id)
    if ex.status is not Status.FAILED:
        raise NotFailed(f"execution {execution_id!r} is {ex.status.value}, not FAILED", status=ex.status.value)
    parts.registry.get(ex.workflow)
    new = tr.redriven_state(ex, parts.clock.now(), parts.config)
    parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    execution_log(new).info("execution.redriven")
    message = StepMessage(new.id, new.current_step, new.attempt, MessageKind.REDRIVE)
    dispatch(parts, tr.Effects(run_next=message))
    return new
