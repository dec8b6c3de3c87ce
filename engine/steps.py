"""A step's attempt: run its body, commit its result, move on (and a sleep's end).

What it shares with every other primitive (recording a failure, retrying, advancing,
failing) is the kernel, engine/attempts.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine import polls
from engine.attempts import advance, check_result, context_for, fail_attempt, follow_recorded_failure, step_at
from engine.errors import ConflictError, PayloadTooLarge, ResultTooLarge
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus
from engine.workflow import PollSpec, SleepSpec, StepSpec, WorkflowSpec


def run_step(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    ctx = context_for(parts, ex, st)
    log = ctx.log
    parts.faults.point(FaultPoint.BEFORE_STEP, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    started = parts.clock.now()
    log.info("step.started")
    try:
        raw: Any = polls.check(ex, st, ctx) if isinstance(st, PollSpec) else st.fn(ctx)
        if polls.said_not_yet(raw):
            return polls.not_yet(parts, ex, spec, st, raw, started_at=started)
        result = check_result(ex, raw, st)
    except Exception as exc:
        return fail_attempt(parts, ex, spec, st, exc, started_at=started, outcome=AttemptOutcome.FAILED)
    parts.faults.point(FaultPoint.AFTER_STEP, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    finished = parts.clock.now()
    attempt = Attempt(ex.attempt, started, finished, AttemptOutcome.COMPLETED)
    try:
        parts.store.commit_step(ex.id, ex.current_step, st.name, attempt, result)
    except PayloadTooLarge as exc:
        # The estimate let it through but the store did not: it can never fit, so fail
        # the step now rather than let the message fail again and again.
        too_large = ResultTooLarge(f"the step's result did not fit its history record: {exc.message}")
        return fail_attempt(parts, ex, spec, st, too_large, started_at=started, outcome=AttemptOutcome.FAILED)
    except ConflictError as exc:
        record = (
            exc.current
            if isinstance(exc.current, StepRecord)
            else parts.store.get_step(ex.id, ex.current_step, st.name)
        )
        if record is None or record.status is not StepStatus.COMPLETED:
            # This attempt was recorded already (failed, or given up on) while it ran here:
            # its result is void, and the retry or the failure that was recorded goes on.
            log.info("step.commit_refused", recorded=None if record is None else record.status.value)
            return follow_recorded_failure(parts, ex, st, record)
        # Another runner committed this step first; its result is the one that counts.
        log.info("step.duplicate_commit")
        return advance(parts, ex, spec, record.result, ran=1)
    log.info("step.completed", duration_ms=round((finished - started) * 1000, 1))
    return advance(parts, ex, spec, result, ran=1)


def wake(parts: Parts, ex: Execution) -> LinkResult:
    """Commit a finished sleep and move on (a wake message, the sweeper or a redriven sleep)."""
    spec = parts.registry.of(ex)
    st = step_at(spec, ex.current_step)
    now = parts.clock.now()
    slept_from = (ex.next_wake_at - st.seconds) if isinstance(st, SleepSpec) and ex.next_wake_at else ex.updated_at
    try:
        parts.store.commit_step(
            ex.id, ex.current_step, st.name, Attempt(1, slept_from, now, AttemptOutcome.COMPLETED), None
        )
    except ConflictError:
        pass  # a concurrent waker recorded it; rolling forward is still right
    done = advance(parts, ex, spec, None, ran=0)
    if done.status is OutcomeStatus.COMPLETED_STEP:
        return replace(done, status=OutcomeStatus.WOKE)
    return done
