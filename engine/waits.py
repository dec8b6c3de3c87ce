"""Waiting on the outside world: the sweeper's side of every wait (its timeout).

A wait is ONE step with ONE history record; its attempt is the step's attempt. The
history record is its commit point, exactly as for a step: whoever commits attempt
``a`` first (a completion, a signal, a child's end, or the timeout recording ``a``
failed) wins, and ``engine/history_rules.py`` refuses the others.

    RUNNING(i, a) ──begin──► WAITING(i, a, wait)  next_wake_at = the wait's timeout (GSI1)
                                 │  completion: commit(i, a) ──► advance ──► RUNNING(i+1) / COMPLETED
                                 │  timeout (sweeper): record a failed ──► retry (a+1) / FAILED
                                 └  a lost race: the loser finds the record and follows it

Parking and finishing: engine/parking.py; callbacks: engine/callbacks.py; signals:
engine/signals.py; polls: engine/polls.py; children: engine/children.py; the runner starts
each (engine/runner.py).
"""

from __future__ import annotations

from engine import attempts, callbacks, handles, signals
from engine import transitions as tr
from engine.errors import CallbackTimeout, HeartbeatTimeout, SignalTimeout, WaitTimeout
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parking import committed, finish_committed, park
from engine.parts import Parts
from engine.state import AttemptOutcome, Execution, WaitKind
from engine.workflow import CallbacksWaitSpec, StepSpec


def expire(parts: Parts, ex: Execution) -> LinkResult:
    """The sweeper found a WAITING execution due: roll a committed wait forward, else time it out."""
    spec = parts.registry.of(ex)
    st = attempts.step_at(spec, ex.current_step)
    assert isinstance(st, StepSpec)
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    if isinstance(st, CallbacksWaitSpec):
        return handles.settle(parts, ex, spec, st)  # its handles' deadlines (engine/handles.py)
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


def deliver_kept(parts: Parts, execution_id: str) -> None:
    """After a resume: what came for the wait while the execution was BLOCKED applies now (a
    kept signal is delivered, a kept callback completion rolled forward, a handles wait settled)."""
    if not signals.deliver_kept(parts, execution_id) and not callbacks.finish_kept(parts, execution_id):
        handles.wake(parts, execution_id)  # completions kept on its handles settle the wait


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
