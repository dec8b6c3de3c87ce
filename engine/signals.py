"""Signals (``wait_for_signal``): named messages sent to an execution, one feeding one wait.

Items: ``PK=EXEC#<id>, SK=SIGNAL#<name>#<received_at>#<uuid>`` (payload, received_at,
consumed_by). Both sides write, then check, so no signal is ever stranded:

- the API keeps the signal (1 write), then reads the execution: if it waits for that
  name at its current step, it delivers;
- the runner at a signal wait looks for the oldest unconsumed signal of that name: one
  there is delivered at once; else it parks WAITING (1 write) and looks again.

Deliver (step i, attempt a) = commit the step's history with the oldest unconsumed
signal's payload and key (the commit point: one wait, one signal), then mark that signal
``consumed_by = "i:a"`` (1 write), then advance. A rolled-forward commit consumes the
signal its record names before advancing, so a later wait of the same name never sees it.
An extra signal stays kept for the next wait of its name; a signal to a terminal
execution is refused (409) and nothing is written, and so is one to an execution whose
workflow this deployment does not register (409 ``workflow_not_registered``: ``check_send``).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine import attempts, definitions
from engine import transitions as tr
from engine.errors import AlreadyTerminal, ExecutionNotFound, InvalidInput
from engine.limits import check_execution_id, check_item, meta_item_size
from engine.outbox import dispatch, execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parking import commit_result, committed, finish_committed, park
from engine.parts import Parts
from engine.state import Attempt, AttemptOutcome, Execution, Signal, Status, Wait, WaitKind, canonical_json
from engine.workflow import NAME_RE, SignalSpec, WorkflowSpec


class SendVerdict(StrEnum):
    """What a signal sent to an execution, as read, means before anything is written."""

    KEEP = "keep"  # write it; delivered at once if its wait is there, else kept for it
    TERMINAL = "terminal"  # 409 ``already_terminal``: no wait will ever take it
    NOT_REGISTERED = "not_registered"  # 409 ``workflow_not_registered``: refused, to be sent again


def check_send(ex: Execution, *, registered: bool) -> SendVerdict:
    """Pure: whether a signal to ``ex`` is kept; ``registered``: this deployment has its workflow.

    A signal to an execution whose workflow is not registered is refused before it is written,
    as a callback's token is, though keeping it would be safe for the execution (the resume
    delivers kept signals, ``deliver_kept``). The reason is the caller: a signal has no
    idempotency key, each send is a new signal, so a 409 must mean nothing was written (a
    caller that sends again on a 409 would otherwise feed two waits), and a 200 would hide
    that nothing can take it until the workflow is registered again. Refused, it is not lost:
    the caller holds it, and the same send succeeds once the workflow is back."""
    if ex.terminal:
        return SendVerdict.TERMINAL
    return SendVerdict.KEEP if registered else SendVerdict.NOT_REGISTERED


@dataclass(frozen=True)
class Sent:
    """What the API answers: the signal kept, and whether a wait consumed it at once."""

    execution_id: str
    name: str
    key: str
    delivered: bool


_SEQUENCE = itertools.count()


def signal_key(now: float) -> str:
    """Arrival order: the time, then this process's sequence (two signals in one clock tick
    keep their order), then randomness (no two control-plane instances collide)."""
    return f"{now:020.6f}#{next(_SEQUENCE):010d}{uuid.uuid4().hex[:16]}"


def consumer(ex: Execution) -> str:
    return f"{ex.current_step}:{ex.attempt}"


# ------------------------------------------------------------------ the API's side


def send(parts: Parts, execution_id: str, name: str, payload: Any) -> Sent:
    """Keep a signal and deliver it if its wait is there. Every check runs before the write.

    Raises ``InvalidInput`` (400), ``PayloadTooLarge`` (413), ``ExecutionNotFound`` (404),
    ``AlreadyTerminal`` (409: a terminal execution refuses signals), ``WorkflowNotRegistered``
    (409: its workflow is not registered here; the message says how to register it). Bad
    input is told first: it would be refused as well once the workflow is back.
    """
    check_execution_id(execution_id)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidInput(f"signal name must match {NAME_RE.pattern}")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidInput("'payload' must be a JSON object")
    payload_json = canonical_json(payload)
    ex = parts.store.get_execution(execution_id)
    if ex is None:
        raise ExecutionNotFound(f"no execution {execution_id!r}", execution_id=execution_id)
    verdict = check_send(ex, registered=not definitions.workflow_missing(parts.registry, ex))
    if verdict is SendVerdict.TERMINAL:
        raise AlreadyTerminal(f"execution {execution_id!r} is already {ex.status.value}", status=ex.status.value)
    # It must fit its own item and, once consumed, the execution's context.
    check_item(meta_item_size(canonical_json(ex.input), canonical_json({**ex.context, **payload})), "the payload")
    check_item(len(payload_json.encode()) + 400, "the payload")
    if verdict is SendVerdict.NOT_REGISTERED:
        execution_log(ex).info("signal.refused_not_registered", signal=name)
        raise definitions.not_registered(parts.registry, ex)
    now = parts.clock.now()
    signal = Signal(execution_id, name, signal_key(now), payload, now)
    parts.store.put_signal(signal)
    execution_log(ex).info("signal.kept", signal=name)
    delivered = _deliver_if_waiting(parts, execution_id, name)
    return Sent(execution_id, name, signal.key, delivered)


def _deliver_if_waiting(parts: Parts, execution_id: str, name: str) -> bool:
    ex = parts.store.get_execution(execution_id)
    if ex is None or not ex.waits_at(ex.current_step, ex.attempt, WaitKind.SIGNAL) or ex.wait is None:
        return False
    if ex.wait.name != name or ex.status is not Status.WAITING:
        return False
    if definitions.workflow_missing(parts.registry, ex):
        definitions.block(parts, ex, definitions.WORKFLOW_NOT_REGISTERED)  # deliver_kept's guard: send refuses it first
        return False
    spec = definitions.spec_for(parts, ex)
    if spec is None:
        # Kept, not delivered: its step may be another one now. Delivered on resume (deliver_kept).
        definitions.block(parts, ex)
        return False
    st = attempts.step_at(spec, ex.current_step)
    if not isinstance(st, SignalSpec):
        return False
    found = parts.store.next_signal(ex.id, name)
    if found is None:
        return False  # a racing delivery took it
    done = deliver(parts, ex, spec, st, found)
    dispatch(parts, done.effects)
    return done.status is OutcomeStatus.COMPLETED_STEP


def deliver_kept(parts: Parts, execution_id: str) -> bool:
    """A signal kept while the execution was BLOCKED goes to its wait once it is resumed."""
    ex = parts.store.get_execution(execution_id)
    if ex is None or ex.status is not Status.WAITING or ex.wait is None or ex.wait.kind is not WaitKind.SIGNAL:
        return False
    return _deliver_if_waiting(parts, execution_id, ex.wait.name)


# ---------------------------------------------------------------- the runner's side


def begin(parts: Parts, ex: Execution, spec: WorkflowSpec, st: SignalSpec) -> LinkResult:
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    found = parts.store.next_signal(ex.id, st.signal)
    if found is not None:
        return deliver(parts, ex, spec, st, found)
    now = parts.clock.now()
    wait = Wait(
        WaitKind.SIGNAL,
        ex.current_step,
        ex.attempt,
        name=st.signal,
        deadline=None if st.wait_timeout is None else now + st.wait_timeout,
    )
    parked = park(parts, ex, tr.waiting_state(ex, wait, now))
    if parked is None:
        return LinkResult(OutcomeStatus.STALE)
    found = parts.store.next_signal(ex.id, st.signal)  # sent between the first look and the park
    if found is not None:
        return deliver(parts, parked, spec, st, found)
    return LinkResult(OutcomeStatus.WAITING)


def deliver(parts: Parts, ex: Execution, spec: WorkflowSpec, st: SignalSpec, signal: Signal) -> LinkResult:
    """Commit ``signal`` as the wait's result (first commit wins), consume it, advance."""
    log = execution_log(ex).bind(step_name=st.name, signal=st.signal)
    now = parts.clock.now()
    started = ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at
    attempt = Attempt(ex.attempt, started, now, AttemptOutcome.COMPLETED, detail={"signal": signal.key})

    def consume() -> None:
        log.info("signal.consumed", key=signal.key)
        parts.store.consume_signal(ex.id, st.signal, signal.key, consumer(ex))

    # Lost to the timeout, recorded first: the signal stays kept for the next wait of its name.
    return commit_result(
        parts, ex, spec, st, attempt, signal.payload, committed_here=consume, lost=lambda: log.info("signal.too_late")
    )
