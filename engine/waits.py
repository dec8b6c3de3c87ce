"""Waiting on the outside world: the runner's and the sweeper's side of every wait.

A wait is ONE step with ONE history record; its attempt is the step's attempt. The
history record is its commit point, exactly as for a step: whoever commits attempt
``a`` first (a completion, a signal, a child's end, or the timeout recording ``a``
failed) wins, and ``engine/history_rules.py`` refuses the others.

    RUNNING(i, a) ──begin──► WAITING(i, a, wait)  next_wake_at = the wait's timeout (GSI1)
                                 │  completion: commit(i, a) ──► advance ──► RUNNING(i+1) / COMPLETED
                                 │  timeout (sweeper): record a failed ──► retry (a+1) / FAILED
                                 └  a lost race: the loser finds the record and follows it

Callbacks: engine/callbacks.py; signals: engine/signals.py; polls: engine/polls.py;
children: engine/children.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import attempts
from engine import transitions as tr
from engine.errors import CallbackTimeout, ConflictError, HeartbeatTimeout, ResultTooLarge, SignalTimeout, WaitTimeout
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus, WaitKind
from engine.workflow import CallbackSpec, ChildSpec, SignalSpec, StepSpec, WorkflowSpec


def begin(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    """A message reached a wait step (RUNNING): start the wait, or finish one already decided."""
    from engine import callbacks, children, signals  # each imports this module's helpers

    if isinstance(st, CallbackSpec):
        return callbacks.begin(parts, ex, spec, st)
    if isinstance(st, SignalSpec):
        return signals.begin(parts, ex, spec, st)
    if isinstance(st, ChildSpec):
        return children.begin(parts, ex, spec, st)
    raise TypeError(f"{type(st).__name__} is not a wait")


def expire(parts: Parts, ex: Execution) -> LinkResult:
    """The sweeper found a WAITING execution due: roll a committed wait forward, else time it out."""
    spec = parts.registry.get(ex.workflow)
    st = attempts.step_at(spec, ex.current_step)
    assert isinstance(st, StepSpec)
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    from engine import callbacks

    if needs_fence(ex):
        claimed = park(parts, ex, tr.timing_out_state(ex, parts.clock.now(), parts.config))
        if claimed is None:
            return LinkResult(OutcomeStatus.STALE)  # a heartbeat (or a completion) moved it first
        ex = claimed
    error = timeout_error(ex, parts.clock.now())
    started = ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at
    execution_log(ex).info("wait.timed_out", kind=ex.wait.kind.value if ex.wait else None, error=type(error).__name__)
    return attempts.fail_attempt(
        parts,
        ex,
        spec,
        st,
        error,
        started_at=started,
        outcome=AttemptOutcome.FAILED,
        detail=callbacks.attempt_detail(ex),
        superseded=lambda rec: finish_committed(parts, ex, spec, st, rec),
    )


def needs_fence(ex: Execution) -> bool:
    """A heartbeat can move this wait's deadline, so its timeout is claimed (one conditional
    write) before it is recorded: otherwise a heartbeat written between the sweeper's read and
    its history write would get 200 for a wait the history says timed out."""
    w = ex.wait
    return w is not None and w.kind is WaitKind.CALLBACK and w.heartbeat_timeout is not None and not tr.timing_out(ex)


def timeout_error(ex: Execution, now: float) -> WaitTimeout:
    w = ex.wait
    if w is None:
        return WaitTimeout("the wait has no state; it is given up")
    if w.kind is WaitKind.CALLBACK:
        if (
            w.heartbeat_deadline is not None
            and w.heartbeat_deadline <= now
            and (w.deadline is None or w.heartbeat_deadline < w.deadline)
        ):
            return HeartbeatTimeout(f"no heartbeat for callback {w.name!r} within {w.heartbeat_timeout:g} s")
        return CallbackTimeout(f"callback {w.name!r} was not completed before its timeout")
    if w.kind is WaitKind.SIGNAL:
        return SignalTimeout(f"no signal {w.name!r} arrived before the timeout")
    return WaitTimeout(f"the {w.kind.value} wait timed out")


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
        from engine import signals

        signals.consume_committed(parts, ex, st, record)
    return finish(parts, ex, spec, st, record.result)


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
