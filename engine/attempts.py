"""The kernel of an attempt: what every primitive shares to record, retry, advance or fail one.

A step, a poll, a wait, a catch handler, a compensation and a fan-out all end an attempt
through these functions; how a failure for good ends (caught, compensated, failed) is
decided once, in engine/escalation.py.

The history record is the commit point of a step's result: ``advance`` rolls the
execution forward with whatever result is committed, whoever committed it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from engine import escalation, fan_results
from engine import transitions as tr
from engine.error_report import BRIEF, FULL, error_info
from engine.errors import (
    ConflictError,
    InvalidResult,
    LoomError,
    PayloadTooLarge,
    ResultTooLarge,
    WorkflowDefinitionError,
)
from engine.history_rules import last_attempt, last_error
from engine.limits import check_item, full_detail, history_item_size, meta_item_size, truncate_middle
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.retry import RetryDecision, RetryPolicy, decide
from engine.serde import DEFAULT, is_typed
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus, canonical_json
from engine.workflow import SleepSpec, StepContext, StepSpec, WorkflowSpec

CONFLICT_RETRIES = 5


def step_at(spec: WorkflowSpec, index: int) -> StepSpec | SleepSpec:
    if index >= len(spec.steps):
        raise WorkflowDefinitionError(
            f"workflow {spec.name!r} has {len(spec.steps)} steps; the execution is at step {index}"
        )
    return spec.steps[index]


def context_for(parts: Parts, ex: Execution, st: StepSpec) -> StepContext:
    """What a step (or a wait's submit, check or child input) sees: a read-only copy of the context."""
    return StepContext(
        execution_id=ex.id,
        workflow=ex.workflow,
        step_index=ex.current_step,
        step_name=st.name,
        attempt=ex.attempt,
        data=MappingProxyType(json.loads(canonical_json(ex.context))),
        log=execution_log(ex).bind(step_name=st.name),
        services=parts.services,
        pages=fan_results.reader(parts, ex.id),
        tokens=lambda step: _token(parts, ex.id, step),
        serializer=st.serializer or DEFAULT,
        _input=ex.input,
    )


def _token(parts: Parts, execution_id: str, step: int) -> str:
    """A callback handle's token, read from its item (engine/handles.py) when a step asks."""
    handle = parts.store.get_handle(execution_id, step)
    if handle is None:
        raise KeyError(f"no callback handle was created by step {step}")
    return handle.token


def check_result(ex: Execution, result: Any, st: StepSpec | None = None) -> dict[str, Any] | None:
    """The result as stored JSON; ``InvalidResult`` or ``ResultTooLarge`` (both non-retryable).

    Given the step ``st``, its serializer dumps the result first: a typed value (a dataclass,
    a model) is one object and lands under the step's name; a dict merges, as without one.
    """
    typed = st is not None and is_typed(result)
    if result is not None and not isinstance(result, dict) and not typed:
        accepted = "a dict, None or a typed value (a dataclass, a model)" if st is not None else "a dict or None"
        raise InvalidResult(f"a step must return {accepted}, not {type(result).__name__}")
    try:
        if st is not None and result is not None:
            dumped = (st.serializer or DEFAULT).dump(result)
            result = {st.name: dumped} if typed else dumped
        result_json = canonical_json(result)
    except (TypeError, ValueError) as exc:
        raise InvalidResult(f"the step's result is not JSON-serialisable: {exc}") from exc
    if not isinstance(result, (dict, type(None))):
        raise InvalidResult(f"the serializer dumped a dict result to {type(result).__name__}, not an object")
    stored: dict[str, Any] | None = json.loads(result_json)
    merged = canonical_json(tr.merge_context(ex.context, stored))
    # Both items the result lands in: the execution (input + merged context, with room to
    # fail later) and the step's history record (result + every attempt so far).
    size = max(meta_item_size(canonical_json(ex.input), merged), history_item_size(result_json, ex.attempt))
    try:
        check_item(size, "the step's result")
    except LoomError as exc:
        raise ResultTooLarge(exc.message) from exc
    return stored


def advance(parts: Parts, ex: Execution, spec: WorkflowSpec, result: dict[str, Any] | None, *, ran: int) -> LinkResult:
    """Roll the execution forward past its current step, whoever committed that step."""
    expected_status, index = ex.status, ex.current_step
    for _ in range(CONFLICT_RETRIES):
        new, effects = tr.after_step(ex, spec, result, parts.clock.now(), parts.config)
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=index)
        except ConflictError as exc:
            fresh = exc.current if isinstance(exc.current, Execution) else parts.store.get_execution(ex.id)
            if fresh is None or fresh.status is not expected_status or fresh.current_step != index:
                execution_log(ex).info("step.advance_lost")
                return LinkResult(OutcomeStatus.STALE, ran)
            ex = fresh
            continue
        execution_log(new).info("execution.advanced", status=new.status.value, version=new.version)
        if new.terminal and new.parent is not None:
            notify_parent(parts, new)  # a child's end wakes its parent
        parts.faults.point(
            FaultPoint.AFTER_CHECKPOINT, execution_id=ex.id, step=index, attempt=ex.attempt, input=ex.input
        )
        return LinkResult(OutcomeStatus.COMPLETED_STEP, ran, replace(effects, written=new))
    raise ConflictError(f"execution {ex.id!r} kept changing while advancing")


def judge_failure(
    parts: Parts,
    ex: Execution,
    policy: RetryPolicy,
    error: BaseException,
    *,
    started_at: float,
    outcome: AttemptOutcome,
    detail: dict[str, Any] | None = None,
) -> tuple[RetryDecision, Attempt, int]:
    """A failed attempt of a step, a compensation or a catch: the policy's decision, the
    attempt record (its error bounded by the attempt number), and how many bodies ran."""
    decision = decide(policy, error, ex.round_attempt, parts.rng)
    info = error_info(error, FULL if full_detail(ex.attempt) else BRIEF)
    delay = decision.delay if decision.retry else None
    attempt = Attempt(ex.attempt, started_at, parts.clock.now(), outcome, info, delay, detail)
    return decision, attempt, 0 if outcome is AttemptOutcome.WORKER_LOST else 1


def fail_attempt(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: StepSpec,
    error: BaseException,
    *,
    started_at: float,
    outcome: AttemptOutcome,
    detail: dict[str, Any] | None = None,
    superseded: Callable[[StepRecord], LinkResult] | None = None,
) -> LinkResult:
    """Record a failed attempt, then retry it or fail the execution, as the policy says.

    ``superseded`` finishes a step whose commit beat this failure (a wait consumes what it
    committed before advancing); by default the execution simply advances.
    """
    log = execution_log(ex).bind(step_name=st.name)
    decision, attempt, ran = judge_failure(
        parts, ex, spec.policy_for(st), error, started_at=started_at, outcome=outcome, detail=detail
    )
    info = attempt.error
    if not record_failure(parts, ex, st.name, attempt, final=not decision.retry):
        record = parts.store.get_step(ex.id, ex.current_step, st.name)
        if record is not None and record.status is StepStatus.COMPLETED:
            # A concurrent run of this step succeeded: that result wins over this failure.
            log.info("step.failure_superseded")
            if superseded is not None:
                return superseded(record)
            return advance(parts, ex, spec, record.result, ran=ran)
    if not decision.retry:
        log.warning("step.failed", error=info, reason=decision.reason)
        return fail_execution(parts, ex, error, st_name=st.name, reason=decision.reason, ran=ran)
    return schedule_retry(parts, ex, st, decision.delay, info, ran=ran)


def fail_phase_attempt(
    parts: Parts,
    ex: Execution,
    policy: RetryPolicy,
    name: str,
    error: BaseException,
    *,
    started_at: float,
    outcome: AttemptOutcome,
    committed: Callable[[StepRecord, int], LinkResult],
    follow: Callable[[StepRecord], LinkResult],
    give_up: Callable[[RetryDecision, dict[str, Any], int], LinkResult],
    retry: Callable[[float, dict[str, Any], int], LinkResult],
) -> LinkResult:
    """A failed attempt of a catch handler or a compensation (history record ``name``): record
    it, then ``retry`` or ``give_up`` as ``policy`` says. A refused record was written by another
    run of this attempt: ``committed`` when it committed, else ``follow`` what it recorded."""
    decision, attempt, ran = judge_failure(parts, ex, policy, error, started_at=started_at, outcome=outcome)
    info = attempt.error or {}
    if not record_failure(parts, ex, name, attempt, final=not decision.retry):
        record = parts.store.get_step(ex.id, ex.current_step, name)
        if record is not None and record.status is StepStatus.COMPLETED:
            return committed(record, ran)
        return follow(record) if record is not None else LinkResult(OutcomeStatus.STALE, ran)
    if not decision.retry:
        return give_up(decision, info, ran)
    return retry(decision.delay, info, ran)


def follow_recorded_failure(parts: Parts, ex: Execution, st: StepSpec, record: StepRecord | None) -> LinkResult:
    """This run's commit lost to a failure of the same attempt, recorded by another run of it
    (ONE_RECORD_PER_ATTEMPT). That run may have lost its own state write to this run's start
    mark, so carry out what it decided; the conditional write makes it a no-op otherwise."""
    if record is None or last_attempt(record) != ex.attempt:
        return LinkResult(OutcomeStatus.STALE, 1)  # a later attempt is recorded: the execution moved on
    recorded = next(a for a in record.attempts if a.attempt == ex.attempt)
    if record.status is StepStatus.FAILED:
        # Failing parks a DLQ record before the state write: read first, so that the
        # usual case (the recorder's own FAILED write landed) parks nothing twice.
        current = parts.store.get_execution(ex.id)
        if current is None or current.version != ex.version:
            return LinkResult(OutcomeStatus.STALE, 1)
        return fail_execution(parts, ex, recorded.error or {}, st_name=st.name, reason="recorded_failure", ran=1)
    due = recorded.finished_at + (recorded.retry_delay or 0.0)
    return schedule_retry(parts, ex, st, max(0.0, due - parts.clock.now()), recorded.error, ran=1)


def follow_failure(
    parts: Parts,
    ex: Execution,
    record: StepRecord,
    *,
    give_up: Callable[[dict[str, Any]], LinkResult],
    retry: Callable[[float, dict[str, Any] | None], LinkResult],
) -> LinkResult:
    """Carry out what a recorded failure of this attempt of a compensation or a catch handler
    decided (its writer may have died before its state write): ``give_up`` with the last error
    of a FAILED record, ``retry`` when the recorded delay is due; STALE when a later attempt is
    recorded (the execution moved on)."""
    if record.status is StepStatus.FAILED:
        return give_up(last_error(record))
    recorded = next((a for a in record.attempts if a.attempt == ex.attempt), None)
    if recorded is None:
        return LinkResult(OutcomeStatus.STALE)
    due = recorded.finished_at + (recorded.retry_delay or 0.0)
    return retry(max(0.0, due - parts.clock.now()), recorded.error)


def schedule_retry(
    parts: Parts, ex: Execution, st: StepSpec, delay: float, info: dict[str, Any] | None, *, ran: int
) -> LinkResult:
    """Move the execution to its next attempt, ``delay`` seconds from now."""
    log = execution_log(ex).bind(step_name=st.name)
    new, effects = tr.retry_state(ex, delay, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        log.info("step.retry_lost")
        return LinkResult(OutcomeStatus.STALE, ran)
    via = "queue" if effects.delayed else "sweeper"
    log.info("step.retry_scheduled", error=info, delay=round(delay, 3), via=via)
    parts.faults.point(
        FaultPoint.AFTER_CHECKPOINT, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt, input=ex.input
    )
    return LinkResult(OutcomeStatus.RETRY_SCHEDULED, ran, effects)


def record_failure(parts: Parts, ex: Execution, name: str, attempt: Attempt, *, final: bool) -> bool:
    """Record a failed attempt in the history record ``name`` (a step's, a compensation's or a
    catch's) at the current step; False when the history rules refuse it."""
    try:
        return parts.store.record_failure(ex.id, ex.current_step, name, attempt, final=final)
    except PayloadTooLarge:
        # A record written before the bounds existed can be too full for a full error;
        # a brief one still says what happened, and the attempt is still counted.
        brief = replace(attempt, error=_brief(attempt.error))
        return parts.store.record_failure(ex.id, ex.current_step, name, brief, final=final)


def _brief(info: dict[str, Any] | None) -> dict[str, Any]:
    info = info or {}
    return {"type": info.get("type", "Error"), "message": truncate_middle(str(info.get("message", "")), 200)}


def fail_execution(
    parts: Parts,
    ex: Execution,
    error: BaseException | dict[str, Any],
    *,
    st_name: str | None,
    reason: str = "",
    ran: int = 0,
) -> LinkResult:
    """``error`` is the exception, or its description as the history recorded it."""
    now = parts.clock.now()
    described = error if isinstance(error, dict) else error_info(error)
    info = {**described, "step": ex.current_step, "step_name": st_name, "attempt": ex.attempt, "reason": reason}
    instead = escalation.escalate(parts, ex, escalation.escalation_for(_spec_of(parts, ex), ex, st_name), info, ran=ran)
    if instead is not None:
        return instead
    # Dead-letter first: a crash before the state write re-runs this path and at
    # worst parks the execution twice; the other order could lose it.
    parts.queue.send_dead_letter(
        {"loom": "failed", "execution_id": ex.id, "workflow": ex.workflow, "failed_at": now, "error": info}
    )
    new = tr.failed_state(ex, info, now, parts.config)
    try:
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except PayloadTooLarge:
            # Only an item accepted before ERROR_RESERVE existed can get here: the execution
            # must still end FAILED, with as much of its error as fits.
            new = tr.failed_state(ex, {**_brief(info), "step": ex.current_step, "reason": reason}, now, parts.config)
            parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("execution.fail_lost")
        return LinkResult(OutcomeStatus.STALE, ran)
    execution_log(new).warning("execution.failed", error=info)
    if new.parent is not None:
        notify_parent(parts, new)
    return LinkResult(OutcomeStatus.FAILED, ran)


def _spec_of(parts: Parts, ex: Execution) -> WorkflowSpec | None:
    try:
        return parts.registry.of(ex)
    except LoomError:
        return None
