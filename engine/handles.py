"""Callback handles (``create_callback`` ... ``wait_for_callbacks``): create now, wait later.

Protocol (DESIGN.md, "Callback handles"), for a handle created by step c and awaited by step w:

1. create (step c): keep the handle item ``CB#<c>`` (1 conditional write, only if absent:
   a second creation, after a crash or a redelivery, gets the first one back, so a handle
   has one token ever), then commit step c with ``{name: {"$loom": "callback", ...}}`` and
   advance. The token is never in the context, the history or a log; a step reads it with
   ``ctx.callback_token(name)``;
2. complete (API, any time): the handle's item moves PENDING -> SUCCEEDED | FAILED, conditional
   on its version (the commit point of a handle: first completion wins; the same completion
   again is a 200 repeat). Then, if the execution waits for it, settle that wait;
3. wait (step w) = settle: read the handles; any failed or timed out fails the step for good
   (catch runs); all succeeded commits ``{name: result, ...}``; a pending one past a deadline is
   first written TIMED_OUT (conditional: it races its completion); else park WAITING with
   ``next_wake_at`` = the earliest deadline, and read again (a completion may have come
   between the read and the park; it settles only a wait it finds WAITING).

A token is ``lcb2.<execution id>.<c>.<secret>`` (144 random bits; logs carry the sha256's
first 12 hex digits). Heartbeats push the handle's own deadline and write nothing else: the
sweeper wakes the wait at the deadline it parked with and parks it again at the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from engine import attempts, definitions
from engine import transitions as tr
from engine.callbacks import SECRET_BYTES, Action, Completion, body_hash, check_body
from engine.error_report import one_line
from engine.errors import (
    CallbackNotFound,
    ConflictError,
    HandleFailed,
    HandleHeartbeatTimeout,
    HandleTimeout,
    MalformedToken,
    PayloadTooLarge,
    ResultTooLarge,
    WaitEnded,
)
from engine.limits import check_execution_id
from engine.log import get_logger
from engine.outbox import dispatch, execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parking import commit_result, committed, finish_committed, park
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.state import (
    HANDLE_TOKEN_PREFIX,
    Attempt,
    AttemptOutcome,
    Execution,
    Handle,
    HandleStatus,
    Status,
    Wait,
    WaitKind,
)
from engine.workflow import CallbackHandleSpec, CallbacksWaitSpec, WorkflowSpec

_TOKEN_RE = re.compile(r"^lcb2\.([A-Za-z0-9_-]{1,128})\.(\d{1,3})\.([A-Za-z0-9_-]{24})$")
SETTLE_ROUNDS = 5  # each round follows one write that beat ours (a completion, a timeout, a park)


class HandleVerdict(StrEnum):
    """What a completion carrying a token means for the handle as read."""

    ACCEPT = "accept"  # pending and within its deadlines: write it
    REPEAT = "repeat"  # completed by this very completion before: 200, nothing changes
    ENDED = "ended"  # completed otherwise, timed out, or the execution has ended: 410
    LATE = "late"  # pending, but a deadline has passed: 410 (the wait records the timeout)
    UNREGISTERED = "unregistered"  # pending, but its workflow is not registered here: 409, kept by the caller
    UNKNOWN = "unknown"  # no such handle, or the secret does not match: 404


class WaitVerdict(StrEnum):
    """What a wait's handles, as read, mean for the wait."""

    DONE = "done"  # every handle succeeded: commit their results
    FAILED = "failed"  # one failed or timed out: the step fails for good
    EXPIRE = "expire"  # one is pending past a deadline: record its timeout first
    PENDING = "pending"  # park until a completion or ``wake_at``


@dataclass(frozen=True)
class WaitDecision:
    verdict: WaitVerdict
    handle: Handle | None = None
    wake_at: float | None = None


@dataclass(frozen=True)
class HandleToken:
    execution_id: str
    step: int
    secret: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.secret.encode()).hexdigest()


def is_handle_token(text: str) -> bool:
    return isinstance(text, str) and text.startswith(f"{HANDLE_TOKEN_PREFIX}.")


def parse(text: str) -> HandleToken:
    """``MalformedToken`` (400) unless ``text`` has the shape of a handle's token."""
    match = _TOKEN_RE.fullmatch(text or "")
    if match is None:
        raise MalformedToken("the callback token is malformed")
    eid, step, secret = match.groups()
    check_execution_id(eid)
    return HandleToken(eid, int(step), secret)


# ------------------------------------------------------------------ pure decisions


def passed(h: Handle, now: float) -> bool:
    return any(d is not None and d <= now for d in (h.deadline, h.heartbeat_deadline))


def check_handle_completion(
    h: Handle | None, token_hash: str, digest: str, action: Action, now: float, *, ended: bool, registered: bool
) -> HandleVerdict:
    """``ended``: the execution is terminal; ``registered``: this deployment has its workflow.

    A live handle of a workflow that is not registered is refused before the handle is written
    (UNREGISTERED), as a callback's token is: the completion would only be kept, the wait it
    feeds is that code's, and a 409 that wrote nothing leaves the caller one thing to do (send
    the same completion again once the workflow is registered: it is then ACCEPT)."""
    if h is None or not hmac.compare_digest(h.token_hash, token_hash):
        return HandleVerdict.UNKNOWN
    if not h.pending:
        same = action is not Action.HEARTBEAT and h.body is not None and hmac.compare_digest(h.body, digest)
        return HandleVerdict.REPEAT if same else HandleVerdict.ENDED
    if ended:
        return HandleVerdict.ENDED
    if passed(h, now):
        return HandleVerdict.LATE
    return HandleVerdict.ACCEPT if registered else HandleVerdict.UNREGISTERED


def ended_reason(ex: Execution, h: Handle) -> str:
    """Pure: what ended the handle ``h`` a completion came for (a 410 ``wait_ended``'s message)."""
    error = h.error or {}
    if h.status is HandleStatus.SUCCEEDED:
        said = f"callback {h.name!r} was completed already"
    elif h.status is HandleStatus.FAILED:
        said = f"callback {h.name!r} failed already ({one_line({'type': 'Error', **error})})"
    elif h.status is HandleStatus.TIMED_OUT:
        said = f"callback {h.name!r} timed out ({error.get('message', '')})"
    else:
        said = f"callback {h.name!r} was still pending"
    if ex.terminal:
        said += f"; execution {ex.id!r} is {ex.status.value}"
    return f"the callback has already ended: {said}"


def decide_wait(handles: list[Handle | None], now: float) -> WaitDecision:
    """In the wait's order: a failure first (the one the catch handler sees), then a timeout."""
    for h in handles:
        if h is None or h.status in (HandleStatus.FAILED, HandleStatus.TIMED_OUT):
            return WaitDecision(WaitVerdict.FAILED, h)
    for h in handles:
        assert h is not None
        if h.pending and passed(h, now):
            return WaitDecision(WaitVerdict.EXPIRE, h)
    pending = [h for h in handles if h is not None and h.pending]
    if not pending:
        return WaitDecision(WaitVerdict.DONE)
    times = [t for t in (h.wake_at() for h in pending) if t is not None]
    return WaitDecision(WaitVerdict.PENDING, wake_at=min(times) if times else None)


def timed_out(h: Handle, now: float) -> Handle:
    """``h`` written TIMED_OUT, with the error that says which deadline passed."""
    hb = h.heartbeat_deadline
    missed = hb is not None and hb <= now and (h.deadline is None or hb < h.deadline)
    error = (
        {
            "type": "HeartbeatTimeout",
            "message": f"no heartbeat for callback {h.name!r} within {h.heartbeat_timeout:g} s",
        }
        if missed
        else {"type": "CallbackTimeout", "message": f"callback {h.name!r} was not completed before its timeout"}
    )
    return replace(h, status=HandleStatus.TIMED_OUT, error=error, completed_at=now, version=h.version + 1)


def failure_of(h: Handle | None) -> Exception:
    """Non-retryable: a retry would read the same handle again (its catch handler takes over)."""
    if h is None:
        return HandleFailed("a callback handle this wait awaits does not exist")
    error = h.error or {}
    if h.status is HandleStatus.TIMED_OUT:
        message = str(error.get("message", ""))
        return HandleHeartbeatTimeout(message) if error.get("type") == "HeartbeatTimeout" else HandleTimeout(message)
    return HandleFailed(f"callback {h.name!r}: {error.get('type', 'Failed')}: {error.get('message', '')}")


def marker(st: CallbackHandleSpec, step: int) -> dict[str, Any]:
    """What the context holds for a handle: enough to find its token, never the token."""
    return {st.name: {"$loom": "callback", "name": st.name, "step": step}}


# ---------------------------------------------------------------- the runner's side


def create(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackHandleSpec) -> LinkResult:
    """Keep the handle (the first creation stands), then commit the step and move on."""
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    now = parts.clock.now()
    fresh = Handle(
        execution_id=ex.id,
        step=ex.current_step,
        name=st.name,
        secret=secrets.token_urlsafe(SECRET_BYTES),
        created_at=now,
        deadline=None if st.wait_timeout is None else now + st.wait_timeout,
        heartbeat_timeout=st.heartbeat_timeout,
        heartbeat_deadline=None if st.heartbeat_timeout is None else now + st.heartbeat_timeout,
    )
    handle = parts.store.create_handle(fresh)
    parts.faults.point(FaultPoint.AFTER_STEP, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    log = execution_log(ex).bind(step_name=st.name, token_hash=handle.token_hash[:12])
    attempt = Attempt(ex.attempt, now, parts.clock.now(), AttemptOutcome.COMPLETED, detail={"token": handle.token_hash})
    value = marker(st, ex.current_step)
    return commit_result(parts, ex, spec, st, attempt, value, committed_here=lambda: log.info("callback.created"))


def begin(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbacksWaitSpec) -> LinkResult:
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if committed(record, ex.attempt):
        assert record is not None
        return finish_committed(parts, ex, spec, st, record)
    return settle(parts, ex, spec, st)


def settle(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbacksWaitSpec) -> LinkResult:
    """Read the wait's handles and carry out what they mean (``decide_wait``)."""
    for _ in range(SETTLE_ROUNDS):
        handles = [parts.store.get_handle(ex.id, step) for step in st.handle_steps]
        now = parts.clock.now()
        decision = decide_wait(handles, now)
        if decision.verdict is WaitVerdict.EXPIRE:
            assert decision.handle is not None
            _expire(parts, ex, decision.handle, now)
            continue
        if decision.verdict is WaitVerdict.FAILED:
            return _fail(parts, ex, spec, st, decision.handle)
        if decision.verdict is WaitVerdict.DONE:
            return _commit(parts, ex, spec, st, [h for h in handles if h is not None])
        parked = _park(parts, ex, st, decision.wake_at)
        if parked is None:
            return LinkResult(OutcomeStatus.STALE)  # a completion (or a cancel) moved it first
        if parked is ex:
            return LinkResult(OutcomeStatus.WAITING)  # parked already, at this wake: nothing to do
        ex = parked  # parked now: read again, for a completion that saw it not yet WAITING
    raise ConflictError(f"execution {ex.id!r}: its callback handles kept changing while it settled")


def _expire(parts: Parts, ex: Execution, h: Handle, now: float) -> None:
    try:
        parts.store.put_handle(timed_out(h, now), expected_version=h.version)
    except ConflictError:
        return  # a completion or a heartbeat came first: the next round reads it
    execution_log(ex).info("callback.timed_out", callback=h.name)


def _park(parts: Parts, ex: Execution, st: CallbacksWaitSpec, wake_at: float | None) -> Execution | None:
    """``ex`` itself when it is parked already at this wake; None when the park lost."""
    w = ex.wait
    if ex.status is Status.WAITING and w is not None and w.kind is WaitKind.HANDLES and ex.next_wake_at == wake_at:
        return ex
    wait = Wait(WaitKind.HANDLES, ex.current_step, ex.attempt, name=st.name, deadline=wake_at)
    return park(parts, ex, tr.waiting_state(ex, wait, parts.clock.now()))


def _started(ex: Execution) -> float:
    return ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at


def _commit(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbacksWaitSpec, handles: list[Handle]
) -> LinkResult:
    results = {h.name: h.result or {} for h in handles}
    detail = {"callbacks": {h.name: h.body for h in handles}}
    attempt = Attempt(ex.attempt, _started(ex), parts.clock.now(), AttemptOutcome.COMPLETED, detail=detail)
    log = execution_log(ex).bind(step_name=st.name)
    return commit_result(parts, ex, spec, st, attempt, results, committed_here=lambda: log.info("callbacks.all_done"))


def _fail(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbacksWaitSpec, h: Handle | None) -> LinkResult:
    detail = None if h is None else {"callback": h.name, "status": h.status.value}
    return attempts.fail_attempt(
        parts,
        ex,
        spec,
        st,
        failure_of(h),
        started_at=_started(ex),
        outcome=AttemptOutcome.FAILED,
        detail=detail,
        superseded=lambda rec: finish_committed(parts, ex, spec, st, rec),
    )


def wake(parts: Parts, execution_id: str, step: int | None = None) -> bool:
    """Settle the execution's handles wait if it is WAITING on one (that awaits handle ``step``,
    when given); True when its definition is not deployed (the completion is kept meanwhile)."""
    ex = parts.store.get_execution(execution_id)
    if ex is None or ex.status is Status.BLOCKED:
        return ex is not None
    w = ex.wait
    if ex.status is not Status.WAITING or w is None or w.kind is not WaitKind.HANDLES:
        return False
    if definitions.workflow_missing(parts.registry, ex):
        definitions.block(parts, ex, definitions.WORKFLOW_NOT_REGISTERED)  # kept as for a changed one
        return True
    spec = definitions.spec_for(parts, ex)
    if spec is None:
        definitions.block(parts, ex)
        return True
    st = attempts.step_at(spec, ex.current_step)
    if not isinstance(st, CallbacksWaitSpec) or (step is not None and step not in st.handle_steps):
        return False
    dispatch(parts, settle(parts, ex, spec, st).effects)
    return False


# ------------------------------------------------------------------ the API's side


def complete(parts: Parts, text: str, action: Action, body: Any = None) -> Completion:
    """Succeed, fail or heartbeat the handle ``text`` is the token of. Every check runs before
    any write. Raises what ``callbacks.complete`` raises, for the same reasons: 404 a handle
    never issued, 410 ``WaitEnded`` one that has ended (the message says how), 409
    ``WorkflowNotRegistered`` a live one whose workflow is not registered (nothing written)."""
    tok = parse(text)
    check_body(action, body)
    ex = parts.store.get_execution(tok.execution_id)
    if ex is None:
        raise CallbackNotFound("no wait is waiting for this callback token")
    digest = body_hash(action, body)
    log = get_logger(execution_id=ex.id, step=tok.step).bind(token_hash=tok.hash[:12], action=action.value)
    registered = not definitions.workflow_missing(parts.registry, ex)
    for _ in range(SETTLE_ROUNDS):
        h = parts.store.get_handle(ex.id, tok.step)
        now = parts.clock.now()
        verdict = check_handle_completion(h, tok.hash, digest, action, now, ended=ex.terminal, registered=registered)
        if verdict is HandleVerdict.UNKNOWN:
            raise CallbackNotFound("no wait is waiting for this callback token")
        assert h is not None
        if verdict is HandleVerdict.REPEAT:
            log.info("callback.repeat")
            # It may be the one a crash cut short before it settled the wait: settle again.
            return _answer(parts, ex, h, action, repeat=True)
        if verdict is HandleVerdict.ENDED:
            log.info("callback.refused", recorded=h.status.value)
            raise WaitEnded(ended_reason(ex, h))
        if verdict is HandleVerdict.LATE:
            log.info("callback.late")
            raise WaitEnded(f"the callback has timed out: callback {h.name!r}'s completion came after its deadline")
        if verdict is HandleVerdict.UNREGISTERED:
            log.info("callback.refused_not_registered", workflow=ex.workflow)
            raise definitions.not_registered(parts.registry, ex)
        new = _completed(parts, ex, h, action, body, digest)
        if new is h:
            return Completion(ex.id, tok.step, 1, action, repeat=True)  # a heartbeat with none configured
        try:
            parts.store.put_handle(new, expected_version=h.version)
        except ConflictError:
            continue  # another completion, a heartbeat or the timeout came first: judge it again
        log.info("callback.heartbeat" if action is Action.HEARTBEAT else "callback.kept_on_handle")
        return _answer(parts, ex, new, action, repeat=False)
    raise ConflictError(f"callback {tok.step} of execution {ex.id!r} kept changing")


def _completed(parts: Parts, ex: Execution, h: Handle, action: Action, body: Any, digest: str) -> Handle:
    """The handle after this completion (``h`` itself: a heartbeat that changes nothing)."""
    now = parts.clock.now()
    if action is Action.HEARTBEAT:
        if h.heartbeat_timeout is None:
            return h
        return replace(h, heartbeat_deadline=now + h.heartbeat_timeout, version=h.version + 1)
    done = replace(h, body=digest, completed_at=now, version=h.version + 1)
    if action is Action.FAIL:
        return replace(done, status=HandleStatus.FAILED, error=body["error"])
    try:
        result = attempts.check_result(ex, body.get("result"))
    except ResultTooLarge as exc:
        raise PayloadTooLarge(f"the callback's result is too large: {exc}") from exc
    return replace(done, status=HandleStatus.SUCCEEDED, result=result)


def _answer(parts: Parts, ex: Execution, h: Handle, action: Action, *, repeat: bool) -> Completion:
    kept = False if action is Action.HEARTBEAT else wake(parts, ex.id, h.step)
    return Completion(ex.id, h.step, 1, action, repeat=repeat, kept=kept)


__all__ = [
    "HandleVerdict",
    "WaitVerdict",
    "begin",
    "check_handle_completion",
    "complete",
    "create",
    "decide_wait",
    "ended_reason",
    "settle",
    "wake",
]
