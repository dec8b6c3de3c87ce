"""The worker's side: handle a step message, then chain further steps while time allows.

``handle_link`` reads, asks ``engine.verdicts`` what the message means, and carries
the verdict out through the primitive it names (``engine.steps``, the waits, catch,
compensation, fan-out); it is the only module that picks one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine import (
    attempts,
    callbacks,
    catching,
    children,
    compensation,
    definitions,
    fan_undo,
    fanout,
    handles,
    signals,
    steps,
)
from engine import transitions as tr
from engine.error_report import error_info
from engine.errors import ConflictError, LoomError, UnknownWorkflow, WorkerLost, WorkflowDefinitionError
from engine.fanout_spec import FanoutSpec
from engine.messages import MessageKind, StepMessage
from engine.outbox import message_log, send
from engine.outcome import LinkResult, Outcome, OutcomeStatus
from engine.parked import malformed_record
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.state import AttemptOutcome, Execution, Status
from engine.verdicts import (
    GuardVerdict,
    MessageVerdict,
    check_guard,
    check_message,
    has_time,
    lapse_wait,
    needs_guard,
    run_is_covered,
)
from engine.workflow import (
    PARKING_WAITS,
    CallbackHandleSpec,
    CallbackSpec,
    CallbacksWaitSpec,
    ChildSpec,
    SignalSpec,
    SleepSpec,
    StepSpec,
    WorkflowSpec,
)

Remaining = Callable[[], float]


def handle(
    parts: Parts, message: StepMessage, *, redelivered: bool = False, remaining: Remaining | None = None
) -> Outcome:
    """Run what ``message`` points at, then chain further steps while time allows.

    A step starts only with its timeout plus the reserve left (``NO_TIME`` otherwise: for
    the first link the caller hands the message back; a chained link's message is sent).
    Raises what the store or queue raise (``TransientError``...) for the first link, so
    that the message is delivered again; a later link's failure is handed back to the queue.
    """
    steps_run = 0
    chained = False
    known: Execution | None = None
    status = OutcomeStatus.NO_TIME  # the last link that ran: what a chain cut short reports
    while True:
        try:
            done = handle_link(parts, message, redelivered=redelivered, known=known, remaining=remaining)
        except Exception as exc:
            if not chained:
                raise
            # The message that started the chain is consumed: redelivering it would be
            # stale. Hand this link back to the queue (guarded), or leave it to the lease.
            message_log(message).warning("chain.link_failed", error=error_info(exc))
            send(parts, replace(message, kind=MessageKind.REDRIVE), 0)
            return Outcome(OutcomeStatus.CHAIN_BROKEN, steps_run)
        if done.status is OutcomeStatus.NO_TIME and chained:
            # Not started and nothing written: an invocation with time runs it.
            send(parts, message, 0)
            parts.faults.point(FaultPoint.AFTER_ENQUEUE, execution_id=message.execution_id, step=message.step)
            return Outcome(status, steps_run)
        status = done.status
        steps_run += done.ran
        nxt = done.effects.run_next
        if done.effects.delayed is not None:
            send(parts, *done.effects.delayed)
        if nxt is None:
            return Outcome(done.status, steps_run)
        if can_chain(parts, remaining):
            message, redelivered, chained, known = nxt, False, True, done.effects.written
            continue
        send(parts, nxt, 0)
        parts.faults.point(FaultPoint.AFTER_ENQUEUE, execution_id=nxt.execution_id, step=nxt.step)
        return Outcome(done.status, steps_run)


def can_chain(parts: Parts, remaining: Remaining | None) -> bool:
    return parts.config.chain and remaining is not None and remaining() > parts.config.chain_reserve_seconds


def handle_link(
    parts: Parts,
    msg: StepMessage,
    *,
    redelivered: bool,
    known: Execution | None = None,
    remaining: Remaining | None = None,
) -> LinkResult:
    # A chained link starts from the state its predecessor wrote (no read back):
    # any write since then makes this link's own conditional write fail.
    ex = known if known is not None and known.id == msg.execution_id else parts.store.get_execution(msg.execution_id)
    log = message_log(msg)
    check = check_message(msg, ex, parts.clock.now(), parts.config, redelivered=redelivered)
    if check.verdict is MessageVerdict.ADOPT and ex is not None:
        # The invocation that had this message died after moving the execution on: do the
        # sweeper's redrive of the current attempt now (verdicts.may_adopt).
        log.warning(
            "message.adopted",
            kind=msg.kind.value,
            current_step=ex.current_step,
            current_attempt=ex.attempt,
            quiet_seconds=round(parts.clock.now() - ex.updated_at, 1),
        )
        msg, redelivered = StepMessage.redrive_of(ex), True
        check = check_message(msg, ex, parts.clock.now(), parts.config, redelivered=True)
    if check.verdict is MessageVerdict.ORPHAN or ex is None:
        log.warning("message.orphan", kind=msg.kind.value)
        return LinkResult(OutcomeStatus.ORPHAN)
    if check.verdict is MessageVerdict.STALE:
        log.info(
            "message.stale",
            kind=msg.kind.value,
            status=ex.status.value,
            current_step=ex.current_step,
            current_attempt=ex.attempt,
        )
        return LinkResult(OutcomeStatus.STALE)
    if check.verdict is MessageVerdict.EARLY:
        if check.resend_in is not None:
            # Raised, not swallowed: the message is acknowledged only once its copy is queued.
            parts.queue.send(msg, check.resend_in)
        log.info("message.early", due_at=check.due_at, resend_in=check.resend_in)
        return LinkResult(OutcomeStatus.EARLY)
    try:
        found = definitions.spec_for(parts, ex)
        if found is None:
            # The deployed definition has another shape: its step at this index may be another
            # step. Stop before running anything (engine/definitions.py).
            return definitions.block(parts, ex)
        spec = found
        if ex.status is Status.COMPENSATING:
            return undo(parts, ex, spec)  # always guarded (engine/compensation.py)
        st = attempts.step_at(spec, ex.current_step)
        if ex.catching is not None and isinstance(st, StepSpec) and st.catch is not None:
            return catching.run(parts, ex, spec, st)  # the step failed for good: its handler runs
        if isinstance(st, FanoutSpec):  # engine/fanout.py: the parent opens or recovers, items run
            if msg.kind is MessageKind.ITEM:
                return fanout.run_item(parts, msg, ex, spec, st, redelivered=redelivered)
            return fanout.drive(parts, ex, spec, st, guarded=redelivered or msg.needs_guard)
        if msg.kind is MessageKind.ITEM:
            return LinkResult(OutcomeStatus.STALE)  # the deployed workflow has no fan-out here
        if check.verdict is MessageVerdict.WAKE or isinstance(st, SleepSpec):
            return steps.wake(parts, ex)  # a wake message, or a redriven sleep: finish it
        if isinstance(st, PARKING_WAITS):
            return begin_wait(parts, ex, spec, st)  # callbacks, signals, children, handles
        if isinstance(st, CallbackHandleSpec):
            return handles.create(parts, ex, spec, st)  # no user code: nothing to guard or time
    except (UnknownWorkflow, WorkflowDefinitionError) as exc:
        if isinstance(exc, UnknownWorkflow) and definitions.workflow_missing(parts.registry, ex):
            # Its own workflow is not registered here: stop it where it is, as a changed one
            # (the recheck resumes it once it is registered again; engine/definitions.py).
            return definitions.block(parts, ex, definitions.WORKFLOW_NOT_REGISTERED)
        # Failing the message would only redeliver it until SQS parks it; fail the execution.
        return attempts.fail_execution(parts, ex, exc, st_name=None)
    # Before the start mark: an at_most_once attempt marked and then killed would count as failed.
    # A step with no declared timeout is held back only by can_chain's reserve, as before.
    timeout = spec.timeout_for(st)
    reserve = parts.config.chain_reserve_seconds
    if timeout is not None and not has_time(None if remaining is None else remaining(), timeout, reserve):
        log.info("step.no_time", timeout=timeout, reserve=reserve)
        return LinkResult(OutcomeStatus.NO_TIME)
    covered = run_is_covered(ex, parts.clock.now(), parts.config)
    if needs_guard(msg, redelivered=redelivered, at_most_once=st.semantics == "at_most_once", covered=covered):
        return run_guarded(parts, ex, spec, st)
    return steps.run_step(parts, ex, spec, st)


def begin_wait(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    """A message reached a wait step (RUNNING): start the wait, or finish one already decided."""
    if isinstance(st, CallbackSpec):
        return callbacks.begin(parts, ex, spec, st)
    if isinstance(st, SignalSpec):
        return signals.begin(parts, ex, spec, st)
    if isinstance(st, ChildSpec):
        return children.begin(parts, ex, spec, st)
    if isinstance(st, CallbacksWaitSpec):
        return handles.begin(parts, ex, spec, st)
    raise TypeError(f"{type(st).__name__} is not a wait")


def undo(parts: Parts, ex: Execution, spec: WorkflowSpec) -> LinkResult:
    """One message of a COMPENSATING execution: a fan-out's items are undone one by one."""
    st = spec.steps[ex.current_step] if ex.current_step < len(spec.steps) else None
    if isinstance(st, FanoutSpec) and st.compensate is not None:
        return fan_undo.run(parts, ex, spec, st)  # each committed item undone once (engine/fan_undo.py)
    return compensation.run(parts, ex, spec)


def run_guarded(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> LinkResult:
    """Look at the history and the start mark first; mark the attempt started; then run it."""
    log = message_log(StepMessage(ex.id, ex.current_step, ex.attempt))
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    now = parts.clock.now()
    guard = check_guard(ex, record, now, parts.config)
    if guard.verdict is GuardVerdict.ROLL_FORWARD and record is not None:
        log.info("step.roll_forward")
        return attempts.advance(parts, ex, spec, record.result, ran=0)
    if guard.verdict is GuardVerdict.IN_FLIGHT:
        # Come back when the mark's lease is out: a live runner has ended by then (the lease is
        # at least the worker's timeout), so the copy finds the step moved on, or its worker
        # lost, a tick and up to a lease sooner than the sweeper would.
        wait = lapse_wait(guard.marked_at if guard.marked_at is not None else now, now, parts.config)
        log.info("step.in_flight_elsewhere", marked_at=guard.marked_at, look_again_in=wait)
        copy = None if wait is None else (StepMessage.redrive_of(ex), wait)
        return LinkResult(OutcomeStatus.IN_FLIGHT, effects=tr.Effects(delayed=copy))
    if guard.verdict is GuardVerdict.WORKER_LOST:
        lost = WorkerLost(f"the worker died while attempt {ex.attempt} of step {st.name!r} ran")
        started = guard.marked_at if guard.marked_at is not None else now
        return attempts.fail_attempt(parts, ex, spec, st, lost, started_at=started, outcome=AttemptOutcome.WORKER_LOST)
    marked = tr.started_state(ex, now, parts.config)
    try:
        parts.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        log.info("message.stale", reason="lost_start_mark")
        return LinkResult(OutcomeStatus.STALE)
    return steps.run_step(parts, marked, spec, st)


def dead_letter_raw(parts: Parts, body: str, reason: LoomError, message_id: str | None = None) -> None:
    """Park a message the worker cannot understand, with why, instead of dropping it."""
    parts.queue.send_dead_letter(malformed_record(body, error_info(reason), message_id))
