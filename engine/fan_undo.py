"""Saga compensation of a fan-out step: each committed item (branch) undone once, last index first.

A COMPENSATING execution at fan-out step i (engine/compensation.py routes it here):

1. fence: record a decision on the join record (``decide_join``) if none is recorded; the
   item transaction requires an undecided join, so no item commits after this point and
   the committed set read next is final;
2. the item to undo is the highest-index COMPLETED item whose item (branch) declares a
   compensation and whose compensation record ``STEP#<i>#<name>[<idx>]#compensate`` is not
   COMPLETED; none left: ``compensation.advance`` (the next step down, or COMPENSATED);
3. that record is judged exactly as a step's compensation (``verdicts.check_compensation``:
   start mark, lease, recorded failures), run with the item's committed result, key
   ``<id>:<i>:<idx>:compensate``, its own retry policy; a commit moves the execution to a
   fresh round at the same step (``transitions.compensating_state``), so the next item runs
   under a new start mark.
"""

from __future__ import annotations

from dataclasses import replace

from engine import attempts, compensation
from engine import transitions as tr
from engine.errors import ConflictError, WorkerLost
from engine.escalation import give_up_compensation
from engine.fan_items import item_context, item_values
from engine.fanout_spec import FanoutSpec
from engine.join import JoinVerdict
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus
from engine.verdicts import CompensationVerdict, check_compensation
from engine.workflow import Phase, WorkflowSpec


def undo_name(st: FanoutSpec, idx: int) -> str:
    return compensation.record_name(f"{st.name}[{idx}]")


def next_to_undo(parts: Parts, ex: Execution, st: FanoutSpec) -> tuple[StepRecord, StepRecord | None] | None:
    """(item record, its compensation record) of the next item to undo, or None."""
    found, _ = _scan(parts, ex, st)
    return found


def _scan(
    parts: Parts, ex: Execution, st: FanoutSpec
) -> tuple[tuple[StepRecord, StepRecord | None] | None, list[StepRecord]]:
    """The next item to undo (as ``next_to_undo``), and the committed undo records passed on the way."""
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return None, []
    items = parts.store.fan_items(ex.id, ex.current_step, join.shards, 0, join.n)
    done: list[StepRecord] = []
    for item in sorted(items, key=lambda r: -r.index):
        if item.status is not StepStatus.COMPLETED or st.item_spec(item.index).compensate is None:
            continue
        undo = parts.store.get_step(ex.id, ex.current_step, undo_name(st, item.index))
        if undo is None or undo.status is not StepStatus.COMPLETED:
            return (item, undo), done
        done.append(undo)
    return None, done


def mark_committed(ex: Execution, done: list[StepRecord]) -> bool:
    """Pure: this round's start mark belongs to an item whose undo committed under it (its
    worker died before the fresh round for the next item was written). That mark says nothing
    about the next item, which never ran: judged by it, it was charged a lost worker."""
    if ex.started_attempt != ex.attempt or ex.attempt_started_at is None:
        return False
    marked = ex.attempt_started_at
    return any(
        a.outcome is AttemptOutcome.COMPLETED and a.attempt == ex.attempt and a.started_at >= marked
        for undo in done
        for a in undo.attempts
    )


def run(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec) -> LinkResult:
    if parts.store.get_join(ex.id, ex.current_step) is not None:
        parts.store.decide_join(ex.id, ex.current_step, JoinVerdict.FAIL.value)  # the fence (1)
    found, done = _scan(parts, ex, st)
    if found is None:
        return compensation.advance(parts, ex, spec, ran=0)
    if mark_committed(ex, done):
        execution_log(ex).info("compensation.roll_forward", reason="previous_item_committed")
        return _next(parts, ex, spec, st, ran=0)  # the round its dead worker did not write
    item, undo = found
    now = parts.clock.now()
    verdict, marked_at = check_compensation(ex, item, undo, now, parts.config)
    if verdict is CompensationVerdict.GIVE_UP and undo is not None:
        return give_up_compensation(parts, ex, undo.error or {})
    if verdict is CompensationVerdict.FOLLOW_RETRY and undo is not None:
        recorded = next((a for a in undo.attempts if a.attempt == ex.attempt), None)
        if recorded is None:
            return LinkResult(OutcomeStatus.STALE)
        due = recorded.finished_at + (recorded.retry_delay or 0.0)
        return _retry(parts, ex, max(0.0, due - now), ran=0)
    if verdict is CompensationVerdict.IN_FLIGHT:
        return LinkResult(OutcomeStatus.IN_FLIGHT)
    if verdict is CompensationVerdict.WORKER_LOST:
        lost = WorkerLost(f"the worker died while undoing item {item.index} of {st.name!r}")
        return _failed(parts, ex, spec, st, item, lost, started_at=marked_at or now, lost=True)
    marked = tr.started_state(ex, now, parts.config)
    try:
        parts.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE)
    return _run_marked(parts, marked, spec, st, item)


def _run_marked(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, item: StepRecord) -> LinkResult:
    undo = st.item_spec(item.index).compensate
    assert undo is not None
    log = execution_log(ex).bind(step_name=st.name, item=item.index, phase=Phase.COMPENSATE.value)
    started = parts.clock.now()
    try:
        values = item_values(parts, ex, st)
        value = values[item.index] if item.index < len(values) else None
        base = item_context(parts, ex, st, item.index, value, ex.attempt)
        committed = item.result if isinstance(item.result, dict) else {"result": item.result}
        ctx = replace(base, phase=Phase.COMPENSATE, result=committed, failure=dict(ex.error or {}))
        result = attempts.check_result(ex, undo(ctx))
    except Exception as exc:
        return _failed(parts, ex, spec, st, item, exc, started_at=started)
    done = Attempt(ex.attempt, started, parts.clock.now(), AttemptOutcome.COMPLETED)
    try:
        parts.store.commit_step(ex.id, ex.current_step, undo_name(st, item.index), done, result)
    except ConflictError:
        log.info("compensation.commit_refused")
        return LinkResult(OutcomeStatus.STALE, 1)  # another run of it recorded first: its message follows
    log.info("compensation.completed")
    info = {"execution_id": ex.id, "step": ex.current_step, "item": item.index, "phase": Phase.COMPENSATE.value}
    parts.faults.point(FaultPoint.AFTER_STEP, **info)
    return _next(parts, ex, spec, st)


def _next(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, *, ran: int = 1) -> LinkResult:
    """Another committed item left: a fresh round at this step; else the next step down."""
    if next_to_undo(parts, ex, st) is None:
        return compensation.advance(parts, ex, spec, ran=ran)
    new, effects = tr.compensating_state(ex, ex.current_step, ex.error or {}, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE, ran)
    return LinkResult(OutcomeStatus.COMPENSATING, ran, replace(effects, written=new))


def _failed(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: FanoutSpec,
    item: StepRecord,
    error: BaseException,
    *,
    started_at: float,
    lost: bool = False,
) -> LinkResult:
    item_spec = st.item_spec(item.index)
    policy = item_spec.compensate_retry or spec.retry
    outcome = AttemptOutcome.WORKER_LOST if lost else AttemptOutcome.FAILED
    decision, attempt, ran = attempts.judge_failure(parts, ex, policy, error, started_at=started_at, outcome=outcome)
    name = undo_name(st, item.index)
    if not parts.store.record_failure(ex.id, ex.current_step, name, attempt, final=not decision.retry):
        return LinkResult(OutcomeStatus.STALE, ran)  # recorded by another run of it: that one carries on
    if not decision.retry:
        return give_up_compensation(parts, ex, {**(attempt.error or {}), "item": item.index}, ran=ran)
    return _retry(parts, ex, decision.delay, ran=ran)


def _retry(parts: Parts, ex: Execution, delay: float, *, ran: int) -> LinkResult:
    new, effects = tr.compensation_retry_state(ex, delay, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE, ran)
    return LinkResult(OutcomeStatus.RETRY_SCHEDULED, ran, effects)
