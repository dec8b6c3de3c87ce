"""Catching a failure: ``step(fn, catch=handler)``.

When the step fails for good, the execution does not fail: it starts a new round of
attempts of the same step (``catching`` holds the failure) in which ``handler(ctx, error)``
runs instead of the step. The handler is a durable step of its own: history record
``STEP#<nnn>#<name>#catch`` under the same rules (engine/history_rules.py) and adapter
writes as any step, the step's retry policy, idempotency key ``<id>:<nnn>:catch``, and it
always runs guarded. Its committed result merges into the context and the workflow goes
on; the forward record keeps the failure, so history shows both. A handler that fails
for good fails the execution (or starts its compensation) as the step would have.
"""

from __future__ import annotations

import json
from types import MappingProxyType

from engine import attempts
from engine import transitions as tr
from engine.errors import ConflictError, PayloadTooLarge, ResultTooLarge, WorkerLost
from engine.history_rules import last_attempt, last_error
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.serde import DEFAULT
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus, canonical_json
from engine.verdicts import GuardVerdict, check_guard
from engine.workflow import Phase, StepContext, StepSpec, WorkflowSpec

SUFFIX = "#" + Phase.CATCH.value


def record_name(step_name: str) -> str:
    return step_name + SUFFIX


def run(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    """One message of a step whose handler runs: guarded, like a redelivered forward step."""
    log = execution_log(ex).bind(step_name=st.name, phase=Phase.CATCH.value)
    name = record_name(st.name)
    record = parts.store.get_step(ex.id, ex.current_step, name)
    if record is not None and record.status is StepStatus.FAILED and last_attempt(record) >= ex.attempt:
        # Given up on in this round; a FAILED record of an earlier round (before a redrive) is not.
        return attempts.fail_execution(parts, ex, last_error(record), st_name=st.name, reason="catch_failed")
    if record is not None and any(a.attempt >= ex.attempt for a in record.attempts) and not _completed(record):
        return _follow(parts, ex, st, record)
    now = parts.clock.now()
    guard = check_guard(ex, record, now, parts.config)
    if guard.verdict is GuardVerdict.ROLL_FORWARD and record is not None:
        log.info("catch.roll_forward")
        return attempts.advance(parts, ex, spec, record.result, ran=0)
    if guard.verdict is GuardVerdict.IN_FLIGHT:
        return LinkResult(OutcomeStatus.IN_FLIGHT)
    if guard.verdict is GuardVerdict.WORKER_LOST:
        lost = WorkerLost(f"the worker died while catch attempt {ex.attempt} of {st.name!r} ran")
        return _fail(parts, ex, spec, st, lost, guard.marked_at or now, AttemptOutcome.WORKER_LOST)
    marked = tr.started_state(ex, now, parts.config)
    try:
        parts.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE)
    return _run_marked(parts, marked, spec, st)


def _run_marked(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    assert st.catch is not None
    log = execution_log(ex).bind(step_name=st.name, phase=Phase.CATCH.value)
    error = dict(ex.catching or {})
    ctx = StepContext(
        execution_id=ex.id,
        workflow=ex.workflow,
        step_index=ex.current_step,
        step_name=st.name,
        attempt=ex.attempt,
        data=MappingProxyType(json.loads(canonical_json(ex.context))),
        log=log,
        services=parts.services,
        phase=Phase.CATCH,
        failure=MappingProxyType(error),
        serializer=st.serializer or DEFAULT,
        _input=ex.input,
    )
    info = {"execution_id": ex.id, "step": ex.current_step, "attempt": ex.attempt, "phase": Phase.CATCH.value}
    parts.faults.point(FaultPoint.BEFORE_STEP, **info)
    started = parts.clock.now()
    try:
        result = attempts.check_result(ex, st.catch(ctx, error), st)
    except Exception as exc:
        return _fail(parts, ex, spec, st, exc, started, AttemptOutcome.FAILED)
    parts.faults.point(FaultPoint.AFTER_STEP, **info)
    attempt = Attempt(ex.attempt, started, parts.clock.now(), AttemptOutcome.COMPLETED)
    try:
        parts.store.commit_step(ex.id, ex.current_step, record_name(st.name), attempt, result)
    except PayloadTooLarge as exc:
        too_large = ResultTooLarge(f"the catch handler's result did not fit its history record: {exc.message}")
        return _fail(parts, ex, spec, st, too_large, started, AttemptOutcome.FAILED)
    except ConflictError as exc:
        record = exc.current if isinstance(exc.current, StepRecord) else None
        record = record or parts.store.get_step(ex.id, ex.current_step, record_name(st.name))
        if record is not None and _completed(record):
            return attempts.advance(parts, ex, spec, record.result, ran=1)
        return _follow(parts, ex, st, record) if record is not None else LinkResult(OutcomeStatus.STALE, 1)
    log.info("catch.completed")
    return attempts.advance(parts, ex, spec, result, ran=1)


def _fail(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: StepSpec,
    error: BaseException,
    started_at: float,
    outcome: AttemptOutcome,
) -> LinkResult:
    return attempts.fail_phase_attempt(
        parts,
        ex,
        spec.policy_for(st),
        record_name(st.name),
        error,
        started_at=started_at,
        outcome=outcome,
        committed=lambda record, ran: attempts.advance(parts, ex, spec, record.result, ran=ran),
        follow=lambda record: _follow(parts, ex, st, record),
        give_up=lambda decision, _info, ran: attempts.fail_execution(
            parts, ex, error, st_name=st.name, reason=f"catch_{decision.reason}", ran=ran
        ),
        retry=lambda delay, info, ran: attempts.schedule_retry(parts, ex, st, delay, info, ran=ran),
    )


def _follow(parts: Parts, ex: Execution, st: StepSpec, record: StepRecord) -> LinkResult:
    """This attempt's failure is recorded (its writer may have died before the state write)."""
    return attempts.follow_failure(
        parts,
        ex,
        record,
        give_up=lambda error: attempts.fail_execution(parts, ex, error, st_name=st.name, reason="catch_failed"),
        retry=lambda delay, error: attempts.schedule_retry(parts, ex, st, delay, error, ran=0),
    )


def _completed(record: StepRecord) -> bool:
    return record.status is StepStatus.COMPLETED
