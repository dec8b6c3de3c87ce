"""Parking and finishing a wait: what callbacks, signals and children share.

A wait is ONE step with ONE history record; its attempt is the step's attempt. The
history record is its commit point, exactly as for a step: whoever commits attempt
``a`` first (a completion, a signal, a child's end, or the timeout recording ``a``
failed) wins, and ``engine/history_rules.py`` refuses the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import attempts
from engine import transitions as tr
from engine.errors import ConflictError, ResultTooLarge
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus
from engine.workflow import SignalSpec, StepSpec, WorkflowSpec


def committed(record: StepRecord | None, attempt: int) -> bool:
    return record is not None and record.status is StepStatus.COMPLETED


def commit_result(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: StepSpec,
    attempt: Attempt,
    value: Any,
    *,
    committed_here: Callable[[], None],
    lost: Callable[[], None] | None = None,
) -> LinkResult:
    """Commit ``value`` (a signal's payload, a child's output) as the wait's result, then move on.

    First commit wins: a commit that lost to another commit rolls that one forward; one that
    lost to a recorded failure (the timeout) is STALE, after ``lost``. A result too large
    fails the attempt. ``committed_here`` runs after this commit, before the advance.
    """
    try:
        result = attempts.check_result(ex, value)
        parts.store.commit_step(ex.id, ex.current_step, st.name, attempt, result)
    except ResultTooLarge as exc:
        return attempts.fail_attempt(
            parts, ex, spec, st, exc, started_at=attempt.started_at, outcome=AttemptOutcome.FAILED
        )
    except ConflictError:
        record = parts.store.get_step(ex.id, ex.current_step, st.name)
        if record is None or not committed(record, ex.attempt):
            if lost is not None:
                lost()
            return LinkResult(OutcomeStatus.STALE)
        return finish_committed(parts, ex, spec, st, record)
    committed_here()
    return finish(parts, ex, spec, st, result)


def finish_committed(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec, record: StepRecord) -> LinkResult:
    """Roll a committed wait forward: consume what it committed (a signal) first, then advance."""
    if isinstance(st, SignalSpec):
        consume_committed(parts, ex, st, record)
    return finish(parts, ex, spec, st, record.result)


def consume_committed(parts: Parts, ex: Execution, st: SignalSpec, record: StepRecord) -> None:
    """Mark consumed the signal a committed wait names (idempotent), before anyone advances."""
    won = record.attempts[-1] if record.attempts else None
    key = (won.detail or {}).get("signal") if won is not None else None
    if key is None or won is None:
        return
    try:
        parts.store.consume_signal(ex.id, st.signal, key, f"{record.index}:{won.attempt}")
    except ConflictError:
        execution_log(ex).error("signal.consumed_twice", key=key)


def finish(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec, result: dict[str, Any] | None) -> LinkResult:
    """The wait's step is committed (and what it committed consumed): move on.

    Retries on a lost write while the execution is still at this step and attempt (a
    runner may be writing WAITING while a completion advances), and stops as soon as
    someone else has moved it.
    """
    index, attempt = ex.current_step, ex.attempt
    for _ in range(attempts.CONFLICT_RETRIES):
        new, effects = tr.after_step(ex, spec, result, parts.clock.now(), parts.config)
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=index)
        except ConflictError:
            fresh = parts.store.get_execution(ex.id)
            if fresh is None or fresh.terminal or fresh.current_step != index or fresh.attempt != attempt:
                execution_log(ex).info("wait.advance_lost")
                return LinkResult(OutcomeStatus.STALE)
            ex = fresh
            continue
        execution_log(new).info("wait.completed", step_name=st.name, status=new.status.value)
        if new.terminal and new.parent is not None:
            notify_parent(parts, new)
        return LinkResult(OutcomeStatus.COMPLETED_STEP, 0, effects)
    raise ConflictError(f"execution {ex.id!r} kept changing while finishing a wait")


def park(parts: Parts, ex: Execution, new: Execution) -> Execution | None:
    """Write ``new`` (WAITING) over ``ex``; None if someone moved the execution first."""
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("wait.park_lost")
        return None
    execution_log(new).info(
        "wait.written",
        status=new.status.value,
        kind=new.wait.kind.value if new.wait else None,
        wake_at=new.next_wake_at,
    )
    return new
