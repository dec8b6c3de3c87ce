"""Child workflows (``child``): a step that starts another execution and waits for its end.

For step i, attempt a of parent P:

1. start the child with the id ``child_id(P, i, a)`` and ``parent = {id, step, attempt}``
   (``lifecycle.start`` is idempotent on the id: a restart never starts two);
2. park P WAITING (kind CHILD, ``child_id``), then look at the child again (it may have ended);
3. the child's terminal write keeps it in GSI1 (``next_wake_at`` = a lease on) and sends
   the parent a CHILD_DONE message for (i, a); a crash before that send is covered by the
   sweeper, which notifies the parent and un-indexes a terminal child only once a notice was sent;
4. the parent's runner reads the child: COMPLETED commits step i with the child's output
   (first commit wins, then advance); FAILED or CANCELLED fails attempt a through the
   retry policy (a retry starts a fresh child, with the new attempt's id).

Cancelling a parent cancels the child it waits for, or the one its current step started before
parking on it (and so on down).
"""

from __future__ import annotations

from engine import attempts
from engine import transitions as tr
from engine.attempts import context_for
from engine.errors import (
    ChildFailed,
    ExecutionAlreadyExists,
    InvalidInput,
    LoomError,
    NonRetryableError,
)
from engine.lifecycle import cancel_child, cancel_children, cancel_running_children, child_id, children_of, start
from engine.outbox import execution_log, notify_parent
from engine.outcome import LinkResult, OutcomeStatus
from engine.parking import commit_result, committed, finish_committed, park
from engine.parts import Parts
from engine.state import Attempt, AttemptOutcome, Execution, Status, Wait, WaitKind
from engine.workflow import ChildSpec, WorkflowSpec


class ChildInputError(NonRetryableError):
    """The child's input function did not return a JSON object, or the child could not start."""


def begin(parts: Parts, ex: Execution, spec: WorkflowSpec, st: ChildSpec) -> LinkResult:
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    cid = child_id(ex.id, ex.current_step, ex.attempt)
    kid = parts.store.get_execution(cid)
    if kid is not None and kid.terminal:
        return resolve(parts, ex, spec, st, kid)
    if kid is None:
        failed = _start_child(parts, ex, spec, st, cid)
        if failed is not None:
            return failed
    if ex.status is Status.WAITING:
        return LinkResult(OutcomeStatus.WAITING)  # a notice for a child that is still running
    wait = Wait(WaitKind.CHILD, ex.current_step, ex.attempt, name=st.workflow, child_id=cid)
    parked = park(parts, ex, tr.waiting_state(ex, wait, parts.clock.now()))
    if parked is None:
        _cancel_if_orphaned(parts, ex, cid)
        return LinkResult(OutcomeStatus.STALE)
    kid = parts.store.get_execution(cid)  # it may have ended before the park: no notice would find us
    if kid is not None and kid.terminal:
        return resolve(parts, parked, spec, st, kid)
    return LinkResult(OutcomeStatus.WAITING, 1)


def _start_child(parts: Parts, ex: Execution, spec: WorkflowSpec, st: ChildSpec, cid: str) -> LinkResult | None:
    started = parts.clock.now()
    try:
        child_input = st.fn(context_for(parts, ex, st))
        if child_input is not None and not isinstance(child_input, dict):
            raise ChildInputError(f"child input must be a dict, not {type(child_input).__name__}")
        parent = {"id": ex.id, "step": ex.current_step, "attempt": ex.attempt}
        start(parts, st.workflow, child_input or {}, cid, parent=parent)
    except (InvalidInput, ExecutionAlreadyExists) as exc:
        bad = ChildInputError(f"child {st.workflow!r} could not start: {exc.message}")
        return attempts.fail_attempt(parts, ex, spec, st, bad, started_at=started, outcome=AttemptOutcome.FAILED)
    except LoomError:
        raise  # throttling and the like: the message is delivered again
    except Exception as exc:
        return attempts.fail_attempt(parts, ex, spec, st, exc, started_at=started, outcome=AttemptOutcome.FAILED)
    execution_log(ex).info("child.started", child_id=cid, workflow=st.workflow)
    return None


def resolve(parts: Parts, ex: Execution, spec: WorkflowSpec, st: ChildSpec, kid: Execution) -> LinkResult:
    """The child has ended: its output commits the step, its failure fails the attempt."""
    started = ex.attempt_started_at if ex.attempt_started_at is not None else kid.created_at
    detail = {"child": kid.id}
    if kid.status is not Status.COMPLETED:
        why = ChildFailed(f"child {kid.id} ended {kid.status.value}: {(kid.error or {}).get('message', '')}")
        return attempts.fail_attempt(
            parts,
            ex,
            spec,
            st,
            why,
            started_at=started,
            outcome=AttemptOutcome.FAILED,
            detail=detail,
            superseded=lambda rec: finish_committed(parts, ex, spec, st, rec),
        )
    attempt = Attempt(ex.attempt, started, parts.clock.now(), AttemptOutcome.COMPLETED, detail=detail)
    return commit_result(
        parts,
        ex,
        spec,
        st,
        attempt,
        kid.context,
        committed_here=lambda: execution_log(ex).info("child.completed", child_id=kid.id),
    )


def _cancel_if_orphaned(parts: Parts, ex: Execution, cid: str) -> None:
    """The park lost: if a cancel won, its cascade may have looked before this worker started
    the child, so nobody else will stop it."""
    latest = parts.store.get_execution(ex.id)
    if latest is not None and latest.status in (Status.CANCELLED, Status.COMPENSATING):
        cancel_child(parts, latest, cid)


__all__ = ["begin", "cancel_children", "cancel_running_children", "child_id", "children_of", "notify_parent", "resolve"]
