"""How a failure for good ends, for every kind of step: caught, compensated, or failed.

``escalation_for`` decides (pure, a value: ``Next``); ``escalate`` carries the decision out.
A step with ``catch`` (any kind: a plain step, a fan-out, a callback, a signal or a poll
wait, a child) runs its handler (engine/catching.py) instead of failing, once; a
saga's failure undoes its committed steps (engine/compensation.py) instead of ending FAILED;
a compensation that fails for good ends COMPENSATION_FAILED. ``FAIL``: the caller fails the
execution as usual (engine/attempts.py ``fail_execution``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from engine import transitions as tr
from engine.errors import ConflictError
from engine.fanout_spec import FanoutSpec
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.state import Execution, Status
from engine.workflow import StepSpec, WorkflowSpec


class Escalation(StrEnum):
    FAIL = "fail"  # end FAILED (parked in the DLQ)
    CATCH = "catch"  # the step's catch handler runs instead
    COMPENSATE = "compensate"  # the saga's committed steps are undone, from ``first`` down
    COMPENSATION_FAILED = "compensation_failed"  # a compensation failed for good


# Where a failure for good can be caught: a step or a poll RUNNING, a callback, a signal or a
# child wait parked WAITING (engine/waits.py, engine/callbacks.py, engine/children.py).
CATCHABLE = (Status.RUNNING, Status.WAITING)


@dataclass(frozen=True)
class Next:
    to: Escalation
    first: int | None = None  # COMPENSATE: the first step to undo


def escalation_for(spec: WorkflowSpec | None, ex: Execution, st_name: str | None) -> Next:
    """What follows a failure for good of ``ex``'s current step (``spec``: None when unknown)."""
    if ex.status is Status.COMPENSATING:
        return Next(Escalation.COMPENSATION_FAILED)
    if spec is None:
        return Next(Escalation.FAIL)
    st = spec.steps[ex.current_step] if 0 <= ex.current_step < len(spec.steps) else None
    caught = isinstance(st, StepSpec) and st.catch is not None and st.name == st_name
    # A wait fails for good while WAITING (its timeout, a callback's failure, a child's end)
    # as often as while RUNNING: either way the execution stands at the step, so it is caught.
    if caught and ex.catching is None and ex.status in CATCHABLE:
        return Next(Escalation.CATCH)
    if not spec.has_compensation:
        return Next(Escalation.FAIL)
    first = tr.compensable_below(spec, ex.current_step)
    if ex.catching is not None and isinstance(st, FanoutSpec) and st.compensate is not None:
        # A fan-out whose handler failed for good: its own committed items are undone first,
        # as they are when it fails without a catch (fanout.finish).
        first = ex.current_step
    if first is None:
        return Next(Escalation.FAIL)
    return Next(Escalation.COMPENSATE, first)


def escalate(parts: Parts, ex: Execution, nxt: Next, error: dict[str, Any], *, ran: int) -> LinkResult | None:
    """Carry ``nxt`` out; None for FAIL (the caller fails the execution)."""
    if nxt.to is Escalation.CATCH:
        return begin_catch(parts, ex, error, ran=ran)
    if nxt.to is Escalation.COMPENSATE and nxt.first is not None:
        return begin_compensation(parts, ex, error, first=nxt.first, ran=ran)
    if nxt.to is Escalation.COMPENSATION_FAILED:
        return give_up_compensation(parts, ex, error, ran=ran)
    return None


def begin_catch(parts: Parts, ex: Execution, error: dict[str, Any], *, ran: int) -> LinkResult:
    new, effects = tr.catching_state(ex, error, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("catch.begin_lost")
        return LinkResult(OutcomeStatus.STALE, ran)
    execution_log(new).warning("step.caught", error=error)
    return LinkResult(OutcomeStatus.RETRY_SCHEDULED, ran, replace(effects, written=new))


def begin_compensation(parts: Parts, ex: Execution, cause: dict[str, Any], *, first: int, ran: int = 0) -> LinkResult:
    """Turn ``ex`` COMPENSATING at step ``first``. Conditional on the version ``ex`` has."""
    new, effects = tr.compensating_state(ex, first, cause, parts.clock.now(), parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("compensation.begin_lost")
        return LinkResult(OutcomeStatus.STALE, ran)
    execution_log(new).warning("compensation.started", cause=cause, first_step=first)
    return LinkResult(OutcomeStatus.COMPENSATING, ran, replace(effects, written=new))


def give_up_compensation(
    parts: Parts, ex: Execution, compensation_error: dict[str, Any], *, ran: int = 0
) -> LinkResult:
    """COMPENSATION_FAILED: parked in the DLQ with the cause and the compensation's error."""
    now = parts.clock.now()
    st_name = _step_name(parts, ex)
    error = {
        "type": "CompensationFailed",
        "message": f"the compensation of step {ex.current_step} ({st_name}) failed for good",
        "step": ex.current_step,
        "step_name": st_name,
        "cause": ex.error,
        "compensation": compensation_error,
    }
    # Dead-letter first, as fail_execution does: a crash in between parks it twice at worst.
    parts.queue.send_dead_letter(
        {
            "loom": "compensation_failed",
            "execution_id": ex.id,
            "workflow": ex.workflow,
            "failed_at": now,
            "error": error,
        }
    )
    new = tr.compensation_failed_state(ex, error, now, parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE, ran)
    execution_log(new).error("compensation.failed", error=error)
    if new.parent is not None:
        notify_parent(parts, new)
    return LinkResult(OutcomeStatus.FAILED, ran)


def _step_name(parts: Parts, ex: Execution) -> str | None:
    try:
        return parts.registry.of(ex).steps[ex.current_step].name
    except Exception:  # an unknown workflow or step: the error says so already
        return None
