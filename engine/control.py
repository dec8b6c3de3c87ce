"""The control API: start, inspect, list, cancel and re-drive executions."""

from __future__ import annotations

from engine import compensation
from engine import transitions as tr
from engine.errors import (
    InvalidInput,
    NotFailed,
)
from engine.lifecycle import cancel as cancel
from engine.lifecycle import get as get
from engine.lifecycle import start as start
from engine.messages import MessageKind, StepMessage
from engine.outbox import dispatch, execution_log
from engine.parts import Parts
from engine.ports import Page
from engine.state import Execution, Status, StepRecord

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
