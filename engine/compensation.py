"""Saga compensation: undo the committed steps in reverse order, each exactly once per commit.

When an execution fails for good (or is cancelled with ``compensate``) and its workflow
declares compensations, it turns COMPENSATING instead of FAILED (CANCELLED). Then, from
the latest compensable step down to the first:

- the step's forward history record says whether it committed; a step that did not
  commit is skipped (``NOT_COMMITTED``), so nothing uncommitted is ever undone;
- the compensation is a durable step of its own: history record
  ``STEP#<nnn>#<name>#compensate`` under the same rules (engine/history_rules.py) and the
  same adapter writes as a forward step, its own retry policy, idempotency key
  ``<id>:<nnn>:compensate``; its COMPLETED record is its commit point, so a commit can be
  undone at most once (COMMIT_ONCE);
- it always runs guarded (start mark + lease), so a duplicate delivery finds IN_FLIGHT
  or DONE, and a dead worker is found by the sweeper as for a forward step.

All compensations committed: COMPENSATED. One failed for good: COMPENSATION_FAILED,
parked in the DLQ with both errors (the cause and the compensation's).
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

from engine import attempts
from engine import transitions as tr
from engine.errors import ConflictError, PayloadTooLarge, ResultTooLarge, WorkerLost
from engine.escalation import give_up_compensation as give_up
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.serde import DEFAULT
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, StepStatus, canonical_json
from engine.verdicts import CompensationVerdict, check_compensation
from engine.workflow import Phase, StepContext, StepSpec, WorkflowSpec

SUFFIX = "#" + Phase.COMPENSATE.value
CONFLICT_RETRIES = 5


def record_name(step_name: str) -> str:
    """The name of a compensation's history record (its SK is ``STEP#<nnn>#<name>#compensate``)."""
    return step_name + SUFFIX


def is_compensation(record: StepRecord) -> bool:
    return record.name.endswith(SUFFIX)


def ordered_history(records: list[StepRecord]) -> list[StepRecord]:
    """Forward records in step order (a catch handler's after its step's), then the
    compensations in the order they ran (reverse)."""
    forward = sorted((r for r in records if not is_compensation(r)), key=lambda r: (r.index, r.name))
    # A fan-out step's items are undone one by one at the same index: in the order they ran,
    # which is the highest item first (engine/fan_undo.py) when their times tie.
    undo = sorted((r for r in records if is_compensation(r)), key=lambda r: (-r.index, r.finished_at or 0.0, -_item(r)))
    return forward + undo


def _item(record: StepRecord) -> int:
    """The item index of a fan-out item's compensation record (``<name>[<idx>]#compensate``), else 0."""
    head = record.name.removesuffix(SUFFIX)
    if head.endswith("]") and "[" in head:
        idx = head[head.rindex("[") + 1 : -1]
        return int(idx) if idx.isdigit() else 0
    return 0


def run(parts: Parts, ex: Execution, spec: WorkflowSpec) -> LinkResult:
    """One message of a COMPENSATING execution at a step (a fan-out's: engine/fan_undo.py):
    check both records, then run, skip or follow."""
    st = spec.steps[ex.current_step] if ex.current_step < len(spec.steps) else None
    if not isinstance(st, StepSpec) or st.compensate is None:
        # The deployed workflow no longer compensates this step: nothing here can undo it.
        return give_up(parts, ex, {"type": "WorkflowDefinitionError", "message": "no compensation at this step"})
    log = execution_log(ex).bind(step_name=st.name, phase=Phase.COMPENSATE.value)
    forward = parts.store.get_step(ex.id, ex.current_step, st.name)
    record = parts.store.get_step(ex.id, ex.current_step, record_name(st.name))
    now = parts.clock.now()
    verdict, marked_at = check_compensation(ex, forward, record, now, parts.config)
    if verdict is CompensationVerdict.NOT_COMMITTED:
        log.warning("compensation.skipped_uncommitted")
        return advance(parts, ex, spec, ran=0)
    if verdict is CompensationVerdict.DONE:
        log.info("compensation.roll_forward")
        return advance(parts, ex, spec, ran=0)
    if verdict in (CompensationVerdict.GIVE_UP, CompensationVerdict.FOLLOW_RETRY) and record is not None:
        return _follow(parts, ex, record)
    if verdict is CompensationVerdict.IN_FLIGHT:
        log.info("compensation.in_flight_elsewhere", marked_at=marked_at)
        return LinkResult(OutcomeStatus.IN_FLIGHT)
    if verdict is CompensationVerdict.WORKER_LOST:
        lost = WorkerLost(f"the worker died while compensation attempt {ex.attempt} of {st.name!r} ran")
        return fail_attempt(parts, ex, spec, st, lost, started_at=marked_at or now, outcome=AttemptOutcome.WORKER_LOST)
    marked = tr.started_state(ex, now, parts.config)
    try:
        parts.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        log.info("message.stale", reason="lost_start_mark")
        return LinkResult(OutcomeStatus.STALE)
    assert forward is not None  # NOT_COMMITTED otherwise
    return _run_marked(parts, marked, spec, st, forward)


def _run_marked(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec, forward: StepRecord) -> LinkResult:
    assert st.compensate is not None
    log = execution_log(ex).bind(step_name=st.name, phase=Phase.COMPENSATE.value)
    ctx = StepContext(
        execution_id=ex.id,
        workflow=ex.workflow,
        step_index=ex.current_step,
        step_name=st.name,
        attempt=ex.attempt,
        data=MappingProxyType(json.loads(canonical_json(ex.context))),
        log=log,
        services=parts.services,
        phase=Phase.COMPENSATE,
        result=MappingProxyType(dict(forward.result or {})),
        failure=MappingProxyType(dict(ex.error or {})),
        serializer=st.serializer or DEFAULT,
        _input=ex.input,
    )
    info = {"execution_id": ex.id, "step": ex.current_step, "attempt": ex.attempt, "phase": Phase.COMPENSATE.value}
    parts.faults.point(FaultPoint.BEFORE_STEP, **info)
    started = parts.clock.now()
    log.info("compensation.started_attempt")
    try:
        result = attempts.check_result(ex, st.compensate(ctx))
    except Exception as exc:
        return fail_attempt(parts, ex, spec, st, exc, started_at=started, outcome=AttemptOutcome.FAILED)
    parts.faults.point(FaultPoint.AFTER_STEP, **info)
    attempt = Attempt(ex.attempt, started, parts.clock.now(), AttemptOutcome.COMPLETED)
    try:
        parts.store.commit_step(ex.id, ex.current_step, record_name(st.name), attempt, result)
    except PayloadTooLarge as exc:
        too_large = ResultTooLarge(f"the compensation's result did not fit its history record: {exc.message}")
        return fail_attempt(parts, ex, spec, st, too_large, started_at=started, outcome=AttemptOutcome.FAILED)
    except ConflictError as exc:
        record = exc.current if isinstance(exc.current, StepRecord) else None
        record = record or parts.store.get_step(ex.id, ex.current_step, record_name(st.name))
        if record is not None and record.status is StepStatus.COMPLETED:
            log.info("compensation.duplicate_commit")
            return advance(parts, ex, spec, ran=1)
        log.info("compensation.commit_refused")
        return _follow(parts, ex, record) if record is not None else LinkResult(OutcomeStatus.STALE, 1)
    log.info("compensation.completed")
    return advance(parts, ex, spec, ran=1)


def advance(parts: Parts, ex: Execution, spec: WorkflowSpec, *, ran: int) -> LinkResult:
    """Move to the next compensation down, or end COMPENSATED."""
    index = ex.current_step
    for _ in range(CONFLICT_RETRIES):
        new, effects = tr.after_compensation(ex, spec, parts.clock.now(), parts.config)
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=index)
        except ConflictError as exc:
            fresh = exc.current if isinstance(exc.current, Execution) else parts.store.get_execution(ex.id)
            if fresh is None or fresh.status is not Status.COMPENSATING or fresh.current_step != index:
                return LinkResult(OutcomeStatus.STALE, ran)
            ex = fresh  # a start mark or a reclaim in between: same position, newer version
            continue
        execution_log(new).info("compensation.advanced", status=new.status.value, current_step=new.current_step)
        if new.terminal:
            notify_parent(parts, new)
        parts.faults.point(
            FaultPoint.AFTER_CHECKPOINT,
            execution_id=ex.id,
            step=index,
            attempt=ex.attempt,
            phase=Phase.COMPENSATE.value,
        )
        status = OutcomeStatus.COMPENSATING if not new.terminal else OutcomeStatus.COMPLETED_STEP
        return LinkResult(status, ran, replace(effects, written=new))
    raise ConflictError(f"execution {ex.id!r} kept changing while compensating")


def fail_attempt(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: StepSpec,
    error: BaseException,
    *,
    started_at: float,
    outcome: AttemptOutcome,
) -> LinkResult:
    """Record a failed compensation attempt; retry it by its policy, or give up."""
    return attempts.fail_phase_attempt(
        parts,
        ex,
        spec.compensation_policy_for(st),
        record_name(st.name),
        error,
        started_at=started_at,
        outcome=outcome,
        committed=lambda _record, ran: advance(parts, ex, spec, ran=ran),
        follow=lambda record: _follow(parts, ex, record),
        give_up=lambda decision, info, ran: give_up(parts, ex, {**info, "reason": decision.reason}, ran=ran),
        retry=lambda delay, _info, ran: _schedule_retry(parts, ex, delay, ran=ran),
    )


def _follow(parts: Parts, ex: Execution, record: StepRecord) -> LinkResult:
    """Carry out what a recorded failure of this attempt decided (its writer may have died)."""
    return attempts.follow_failure(
        parts,
        ex,
        record,
        give_up=lambda error: give_up(parts, ex, error, ran=0),
        retry=lambda delay, _error: _schedule_retry(parts, ex, delay, ran=0),
    )


def _schedule_retry(parts: Parts, ex: Execution, delay: float, *, ran: int) -> LinkResult:
    new, effects = tr.compensation_retry_state(ex, delay, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE, ran)
    execution_log(ex).info("compensation.retry_scheduled", delay=round(delay, 3))
    return LinkResult(OutcomeStatus.RETRY_SCHEDULED, ran, effects)
