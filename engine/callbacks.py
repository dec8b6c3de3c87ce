"""Callbacks (``wait_for_callback``): a token handed to the outside world, completed through the API.

Protocol (DESIGN.md, "Waits"), for step i, attempt a:

1. mark: the execution is written with ``started_attempt = a`` and ``wait.token_hash``
   (1 conditional write), so the hash is durable before anyone outside sees the token;
2. ``submit(ctx, token)`` runs as the step's body (its retry policy, ``ctx.idempotency_key``);
3. park: WAITING, ``next_wake_at`` = the earliest of the timeout and the heartbeat deadline
   (1 conditional write; no timeout at all = not in GSI1, nothing ever runs);
4. completion (API): commit the history record of (i, a) with the token's and the body's
   hashes (the commit point: first wins), then advance and send the next message.

A completion for an execution whose definition this deployment lacks (BLOCKED, or about to
be) is kept: a success is committed at once (the commit point needs only the wait's name,
which the execution holds) and answered 202 ``kept``; the advance waits for the resume
(``finish_kept``). A failure is refused, retryable (``ExecutionBlocked``): what it leads to
is the missing definition's retry policy, and the history records an attempt once.

A token is ``lcb1.<execution id>.<step>.<attempt>.<secret>``: the secret is 144 random bits
and only its sha256 is stored; logs carry ``token_hash[:12]``, never the token.
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
from engine.attempts import context_for
from engine.error_report import error_info, one_line
from engine.errors import (
    CallbackFailed,
    CallbackNotFound,
    ConflictError,
    ExecutionBlocked,
    InvalidInput,
    MalformedToken,
    PayloadTooLarge,
    ResultTooLarge,
    UnknownWorkflow,
    WaitEnded,
    WorkerLost,
)
from engine.limits import check_execution_id
from engine.log import get_logger
from engine.outbox import dispatch, execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parking import committed, finish, finish_committed, park
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, Wait, WaitKind, canonical_json
from engine.verdicts import GuardVerdict, check_guard
from engine.workflow import CallbackSpec, WorkflowSpec

TOKEN_PREFIX = "lcb1"
# Where a callback's wait is live: submit running (marked), or parked.
LIVE = (Status.RUNNING, Status.WAITING)
SECRET_BYTES = 18  # 144 random bits
_TOKEN_RE = re.compile(r"^lcb1\.([A-Za-z0-9_-]{1,128})\.(\d{1,3})\.(\d{1,6})\.([A-Za-z0-9_-]{24})$")


class Action(StrEnum):
    SUCCEED = "succeed"
    FAIL = "fail"
    HEARTBEAT = "heartbeat"


class CompletionVerdict(StrEnum):
    ACCEPT = "accept"  # the token is the current wait's: write the completion
    KEEP = "keep"  # ... of a BLOCKED execution: commit it, the resume moves it on
    ENDED = "ended"  # the token names an attempt the execution has left: a repeat or a 410
    UNKNOWN = "unknown"  # no such wait was ever issued (or the secret does not match): 404


@dataclass(frozen=True)
class Token:
    execution_id: str
    step: int
    attempt: int
    secret: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.secret.encode()).hexdigest()


@dataclass(frozen=True)
class Completion:
    """What the API answers: the wait a token belongs to and whether this call changed it."""

    execution_id: str
    step: int
    attempt: int
    action: Action
    repeat: bool
    # The execution is BLOCKED: the completion is committed and applies when it resumes (202).
    kept: bool = False


def issue(execution_id: str, step: int, attempt: int) -> tuple[str, str]:
    """A new token for (execution, step, attempt) and the hash the execution keeps."""
    tok = Token(execution_id, step, attempt, secrets.token_urlsafe(SECRET_BYTES))
    return f"{TOKEN_PREFIX}.{execution_id}.{step}.{attempt}.{tok.secret}", tok.hash


def parse(text: str) -> Token:
    """``MalformedToken`` (400) unless ``text`` has the shape of a token Loom issues."""
    match = _TOKEN_RE.fullmatch(text or "")
    if match is None:
        raise MalformedToken("the callback token is malformed")
    eid, step, attempt, secret = match.groups()
    check_execution_id(eid)
    return Token(eid, int(step), int(attempt), secret)


def redacted(token_hash: str | None) -> str | None:
    return None if token_hash is None else token_hash[:12]


def check_completion(ex: Execution, tok: Token) -> CompletionVerdict:
    """Pure: what a completion carrying ``tok`` means for ``ex`` as read."""
    w = ex.wait
    if ex.waits_at(tok.step, tok.attempt, WaitKind.CALLBACK) and ex.status in (*LIVE, Status.BLOCKED):
        assert w is not None and w.token_hash is not None
        if not hmac.compare_digest(w.token_hash, tok.hash):
            return CompletionVerdict.UNKNOWN
        return CompletionVerdict.KEEP if ex.status is Status.BLOCKED else CompletionVerdict.ACCEPT
    if ex.terminal or (tok.step, tok.attempt) < (ex.current_step, ex.attempt):
        return CompletionVerdict.ENDED
    return CompletionVerdict.UNKNOWN


def ended_reason(ex: Execution, tok: Token, mine: Attempt | None) -> str:
    """Pure: what ended the wait ``tok`` is for, as ``ex`` and the record of the token's attempt
    (``mine``, None when there is none) say: the line a 410 ``wait_ended`` gives its caller."""
    said = [] if mine is None else [_outcome_line(mine)]
    if ex.terminal:
        said.append(f"execution {ex.id!r} is {ex.status.value}")
    elif ex.current_step == tok.step and ex.attempt > tok.attempt:
        said.append(f"attempt {ex.attempt} is the current one, with a token of its own")
    elif ex.current_step != tok.step:
        said.append(f"execution {ex.id!r} has moved on to step {ex.current_step}")
    reason = "; ".join(said) or "it was completed, timed out or superseded by a retry"
    return f"the wait has already ended: {reason}"


def _outcome_line(mine: Attempt) -> str:
    error = mine.error or {}
    if mine.outcome is AttemptOutcome.COMPLETED:
        return f"its attempt {mine.attempt} was completed already"
    if mine.outcome is AttemptOutcome.WORKER_LOST:
        return f"its attempt {mine.attempt} was lost with the worker that submitted it"
    what = one_line({"type": "Error", **error}).rstrip(": ")
    if str(error.get("type", "")).endswith("Timeout"):
        return f"its attempt {mine.attempt} timed out ({what})"
    return f"its attempt {mine.attempt} failed ({what})"


def heartbeat_refused(ex: Execution, now: float) -> bool:
    """Pure: a heartbeat may push the deadline only while no deadline has passed and the
    sweeper has not begun the timeout; its write is conditional on the version it read, so
    either it lands first (the sweeper's claim then loses) or it sees the claim."""
    w = ex.wait
    if w is None:
        return True
    passed = any(d is not None and d <= now for d in (w.deadline, w.heartbeat_deadline))
    return passed or tr.timing_out(ex)


def body_hash(action: Action, body: Any) -> str:
    return hashlib.sha256(canonical_json({"action": action.value, "body": body}).encode()).hexdigest()


def attempt_detail(ex: Execution, body: str | None = None) -> dict[str, Any] | None:
    """What a callback attempt's history keeps: the token's hash (and the completion's)."""
    w = ex.wait
    if w is None or w.kind is not WaitKind.CALLBACK or w.attempt != ex.attempt:
        return None
    return {"token": w.token_hash, **({"body": body} if body is not None else {})}


# ---------------------------------------------------------------- the runner's side


def begin(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackSpec) -> LinkResult:
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    now = parts.clock.now()
    guard = check_guard(ex, record, now, parts.config)
    if guard.verdict is GuardVerdict.ROLL_FORWARD and record is not None:
        return finish_committed(parts, ex, spec, st, record)
    if guard.verdict is GuardVerdict.IN_FLIGHT:
        return LinkResult(OutcomeStatus.IN_FLIGHT)
    if guard.verdict is GuardVerdict.WORKER_LOST:
        lost = WorkerLost(f"the worker died while submitting callback {st.name!r} (attempt {ex.attempt})")
        started = guard.marked_at if guard.marked_at is not None else now
        return attempts.fail_attempt(
            parts, ex, spec, st, lost, started_at=started, outcome=AttemptOutcome.WORKER_LOST, detail=attempt_detail(ex)
        )
    token, token_hash = issue(ex.id, ex.current_step, ex.attempt)
    wait = Wait(
        WaitKind.CALLBACK,
        ex.current_step,
        ex.attempt,
        name=st.name,
        token_hash=token_hash,
        deadline=None if st.wait_timeout is None else now + st.wait_timeout,
        heartbeat_timeout=st.heartbeat_timeout,
        heartbeat_deadline=None if st.heartbeat_timeout is None else now + st.heartbeat_timeout,
    )
    marked = tr.marked_wait_state(ex, wait, now, parts.config)
    if park(parts, ex, marked) is None:
        return LinkResult(OutcomeStatus.STALE)
    return _submit(parts, marked, spec, st, token)


def _submit(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackSpec, token: str) -> LinkResult:
    log = execution_log(ex).bind(step_name=st.name, token_hash=redacted(ex.wait.token_hash if ex.wait else None))
    parts.faults.point(FaultPoint.BEFORE_STEP, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    started = parts.clock.now()
    log.info("callback.submitting")
    try:
        st.submit(context_for(parts, ex, st), token)
    except Exception as exc:
        return attempts.fail_attempt(
            parts, ex, spec, st, exc, started_at=started, outcome=AttemptOutcome.FAILED, detail=attempt_detail(ex)
        )
    parts.faults.point(FaultPoint.AFTER_STEP, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    assert ex.wait is not None
    if park(parts, ex, tr.waiting_state(ex, ex.wait, parts.clock.now())) is None:
        return LinkResult(OutcomeStatus.STALE, 1)  # completed (or cancelled) while submit ran
    return LinkResult(OutcomeStatus.WAITING, 1)


# ------------------------------------------------------------------ the API's side


def complete(parts: Parts, text: str, action: Action, body: Any = None) -> Completion:
    """Succeed, fail or heartbeat the wait ``text`` belongs to. Every check runs before any write.

    Raises ``MalformedToken``/``InvalidInput`` (400), ``PayloadTooLarge`` (413),
    ``CallbackNotFound`` (404: never issued), ``WaitEnded`` (410: completed otherwise, timed out,
    superseded, or its execution ended; the message says which),
    ``ExecutionBlocked`` (409, retry later: a failure while its definition is not deployed),
    ``WorkflowNotRegistered`` (409: a live token of a workflow this deployment does not register).
    """
    tok = parse(text)
    check_body(action, body)
    ex = parts.store.get_execution(tok.execution_id)
    if ex is None:
        raise CallbackNotFound("no wait is waiting for this callback token")
    digest = body_hash(action, body)
    log = get_logger(execution_id=ex.id, step=tok.step, attempt=tok.attempt).bind(
        token_hash=redacted(tok.hash), action=action.value
    )
    verdict = check_completion(ex, tok)
    found = _spec(parts, ex, verdict)
    if found is None or verdict is CompletionVerdict.KEEP:
        # BLOCKED even if its definition is back: the recheck resumes it, and the kept commit then.
        return _while_blocked(parts, ex, tok, verdict, action, body, digest, log)
    st, spec = _callback_step(found, tok)
    if verdict is CompletionVerdict.UNKNOWN:
        raise CallbackNotFound("no wait is waiting for this callback token")
    if verdict is CompletionVerdict.ENDED:
        return _repeat(parts, ex, st.name, tok, action, digest, log, spec)
    if action is Action.HEARTBEAT:
        return _heartbeat(parts, ex, tok, log)
    if action is Action.SUCCEED:
        return _succeed(parts, ex, spec, st, tok, body.get("result"), digest, log)
    return _fail(parts, ex, spec, st, tok, body["error"], digest, log)


def check_body(action: Action, body: Any) -> None:
    if action is Action.HEARTBEAT:
        if body not in (None, {}):
            raise InvalidInput("a heartbeat takes no body (or {})")
        return
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    allowed = {"result"} if action is Action.SUCCEED else {"error"}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInput(f"unknown field(s) {unknown}; allowed: {sorted(allowed)}")
    if action is Action.SUCCEED:
        if body.get("result") is not None and not isinstance(body.get("result"), dict):
            raise InvalidInput("'result' must be a JSON object")
        return
    error = body.get("error")
    if (
        not isinstance(error, dict)
        or set(error) - {"type", "message"}
        or not isinstance(error.get("type"), str)
        or not isinstance(error.get("message", ""), str)
    ):
        raise InvalidInput('\'error\' must be {"type": string, "message": string}')


def _spec(parts: Parts, ex: Execution, verdict: CompletionVerdict) -> WorkflowSpec | None:
    """The definition ``ex`` runs on; None when none has its shape. When its workflow is not
    registered at all, the token of its live wait (its secret checked: ACCEPT or KEEP) is told so
    (409 ``workflow_not_registered``, with the fix), not that no wait waits for it: the wait is
    there, this deployment lacks its code. Any other token learns nothing more than before."""
    try:
        return definitions.spec_for(parts, ex)
    except UnknownWorkflow:
        if verdict not in (CompletionVerdict.ACCEPT, CompletionVerdict.KEEP):
            raise CallbackNotFound("no wait is waiting for this callback token") from None
        raise definitions.not_registered(parts.registry, ex) from None


def _callback_step(spec: WorkflowSpec, tok: Token) -> tuple[CallbackSpec, WorkflowSpec]:
    st = spec.steps[tok.step] if tok.step < len(spec.steps) else None
    if not isinstance(st, CallbackSpec):
        raise CallbackNotFound("no wait is waiting for this callback token")
    return st, spec


def _started(ex: Execution) -> float:
    return ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at


def _succeed(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackSpec, tok: Token, result: Any, digest: str, log: Any
) -> Completion:
    try:
        stored = attempts.check_result(ex, result)
    except ResultTooLarge as exc:
        raise PayloadTooLarge(f"the callback's result is too large: {exc}") from exc
    attempt = Attempt(
        tok.attempt,
        _started(ex),
        parts.clock.now(),
        AttemptOutcome.COMPLETED,
        detail={"token": tok.hash, "body": digest},
    )
    try:
        parts.store.commit_step(ex.id, tok.step, st.name, attempt, stored)
    except ConflictError:
        return _repeat(parts, ex, st.name, tok, Action.SUCCEED, digest, log, spec)
    log.info("callback.completed")
    _advance(parts, ex, spec, st, stored)
    return Completion(ex.id, tok.step, tok.attempt, Action.SUCCEED, repeat=False)


def _advance(parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackSpec, result: Any) -> None:
    done = finish(parts, ex, spec, st, result)
    if done.status is OutcomeStatus.COMPLETED_STEP:
        parts.faults.point(FaultPoint.AFTER_CHECKPOINT, execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
    dispatch(parts, done.effects)


def _fail(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: CallbackSpec, tok: Token, error: Any, digest: str, log: Any
) -> Completion:
    failure = CallbackFailed(f"{error['type']}: {error.get('message', '')}")
    # Two equal failures racing both find their body recorded: the write id tells the
    # one whose record it is (200) from the repeat (200, repeat).
    write_id = secrets.token_hex(8)
    done = attempts.fail_attempt(
        parts,
        ex,
        spec,
        st,
        failure,
        started_at=_started(ex),
        outcome=AttemptOutcome.FAILED,
        detail={"token": tok.hash, "body": digest, "write": write_id},
        superseded=lambda rec: LinkResult(OutcomeStatus.STALE),
    )
    dispatch(parts, done.effects)
    record = parts.store.get_step(ex.id, tok.step, st.name)
    mine = _attempt(record, tok.attempt)
    if mine is None or (mine.detail or {}).get("body") != digest:
        log.info("callback.fail_lost")
        raise WaitEnded(ended_reason(parts.store.get_execution(ex.id) or ex, tok, mine))
    repeat = (mine.detail or {}).get("write") != write_id
    log.info("callback.repeat" if repeat else "callback.failed", error=error_info(failure))
    return Completion(ex.id, tok.step, tok.attempt, Action.FAIL, repeat=repeat)


def _heartbeat(parts: Parts, ex: Execution, tok: Token, log: Any) -> Completion:
    w = ex.wait
    assert w is not None
    blocked = ex.status is Status.BLOCKED
    parked = ex.status is Status.WAITING or (blocked and (ex.blocked or {}).get("from") == Status.WAITING.value)
    if not parked or w.heartbeat_timeout is None:
        # submit is still running (the heartbeat clock starts at WAITING), or none is configured.
        return Completion(ex.id, tok.step, tok.attempt, Action.HEARTBEAT, repeat=True, kept=blocked)
    now = parts.clock.now()
    if heartbeat_refused(ex, now):
        log.info("callback.heartbeat_late")
        raise WaitEnded("the wait has timed out: the heartbeat came after its deadline")
    pushed = replace(w, heartbeat_deadline=now + w.heartbeat_timeout)
    # While BLOCKED the due index holds the recheck; the resume puts the wait's own deadline back.
    wake = ex.next_wake_at if blocked else pushed.wake_at()
    try:
        parts.store.put_execution(
            ex.evolve(now, wait=pushed, next_wake_at=wake), expected_version=ex.version, expected_step=ex.current_step
        )
    except ConflictError:
        fresh = parts.store.get_execution(ex.id)
        live = (CompletionVerdict.ACCEPT, CompletionVerdict.KEEP)
        if fresh is None or check_completion(fresh, tok) not in live:
            said = "the wait ended while the heartbeat was written" if fresh is None else ended_reason(fresh, tok, None)
            raise WaitEnded(said) from None
        return _heartbeat(parts, fresh, tok, log)
    log.info("callback.heartbeat", heartbeat_deadline=pushed.heartbeat_deadline, blocked=blocked)
    return Completion(ex.id, tok.step, tok.attempt, Action.HEARTBEAT, repeat=False, kept=blocked)


def _while_blocked(
    parts: Parts,
    ex: Execution,
    tok: Token,
    verdict: CompletionVerdict,
    action: Action,
    body: Any,
    digest: str,
    log: Any,
) -> Completion:
    """No registered definition has ``ex``'s shape (it is BLOCKED, or is blocked here: its
    advance needs the definition). A success for its live wait is committed and kept for the
    resume; a heartbeat pushes the wait's deadline; a failure is refused, to be sent again."""
    if verdict is CompletionVerdict.UNKNOWN:
        raise CallbackNotFound("no wait is waiting for this callback token")
    if verdict is CompletionVerdict.ENDED:
        name = _recorded_name(parts, ex, tok.step)
        if name is None:
            raise WaitEnded(ended_reason(ex, tok, None))
        return _repeat(parts, ex, name, tok, action, digest, log, None)
    if action is Action.HEARTBEAT:
        return _heartbeat(parts, ex, tok, log)
    if action is Action.FAIL:
        if ex.status is not Status.BLOCKED:
            definitions.block(parts, ex)
        wait = parts.config.blocked_recheck_seconds
        log.info("callback.fail_refused_blocked", retry_after=wait)
        raise ExecutionBlocked(
            f"execution {ex.id!r} is BLOCKED (its workflow's definition is not deployed): what a failure "
            f"leads to is that definition's retry policy; send it again once it resumes (retry in {wait:g} s)",
            retry_after=wait,
        )
    return _keep(parts, ex, tok, body.get("result"), digest, log)


def _keep(parts: Parts, ex: Execution, tok: Token, result: Any, digest: str, log: Any) -> Completion:
    """Commit a success for the wait of an execution whose definition is not deployed: the
    record needs only the wait's name (the execution holds it), and the timeout cannot be
    recorded meanwhile (it needs the definition), so first wins as ever. Then BLOCKED."""
    assert ex.wait is not None
    try:
        stored = attempts.check_result(ex, result)
    except ResultTooLarge as exc:
        raise PayloadTooLarge(f"the callback's result is too large: {exc}") from exc
    detail = {"token": tok.hash, "body": digest}
    attempt = Attempt(tok.attempt, _started(ex), parts.clock.now(), AttemptOutcome.COMPLETED, detail=detail)
    try:
        parts.store.commit_step(ex.id, tok.step, ex.wait.name, attempt, stored)
    except ConflictError:
        done = _repeat(parts, ex, ex.wait.name, tok, Action.SUCCEED, digest, log, None)
    else:
        log.info("callback.kept")
        done = Completion(ex.id, tok.step, tok.attempt, Action.SUCCEED, repeat=False)
    kept = ex.status is Status.BLOCKED or definitions.block(parts, ex).status is OutcomeStatus.BLOCKED
    return replace(done, kept=done.kept or kept)


def _recorded_name(parts: Parts, ex: Execution, index: int) -> str | None:
    """The name of step ``index`` as its history recorded it (no definition to read it from)."""
    return next((r.name for r in parts.store.history(ex.id) if r.index == index and "#" not in r.name), None)


def finish_kept(parts: Parts, execution_id: str) -> bool:
    """A resumed execution whose callback wait a completion committed while it was BLOCKED
    moves on with that result (the sweeper calls it after the resume; its recheck left the
    wait due at once, so ``waits.expire`` rolls it forward if this never runs)."""
    ex = parts.store.get_execution(execution_id)
    if ex is None or ex.status is not Status.WAITING or ex.wait is None or ex.wait.kind is not WaitKind.CALLBACK:
        return False
    spec = definitions.spec_for(parts, ex)
    st = spec.steps[ex.current_step] if spec is not None and ex.current_step < len(spec.steps) else None
    if spec is None or not isinstance(st, CallbackSpec):
        return False
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    if record is None or not committed(record, ex.attempt):
        return False
    execution_log(ex).info("callback.kept_applied", step_name=st.name)
    _advance(parts, ex, spec, st, record.result)
    return True


def _attempt(record: StepRecord | None, number: int) -> Attempt | None:
    if record is None:
        return None
    return next((a for a in record.attempts if a.attempt == number), None)


def _repeat(
    parts: Parts,
    ex: Execution,
    name: str,
    tok: Token,
    action: Action,
    digest: str,
    log: Any,
    spec: WorkflowSpec | None,
) -> Completion:
    """The wait's attempt is decided: the same completion again is a 200 that changes nothing
    (and finishes an advance a crash cut short, when ``spec``, the definition, is deployed);
    anything else is a 410 saying what ended it."""
    record = parts.store.get_step(ex.id, tok.step, name)
    mine = _attempt(record, tok.attempt)
    detail = (mine.detail or {}) if mine is not None else {}
    if mine is not None and detail.get("token") is not None and not hmac.compare_digest(detail["token"], tok.hash):
        raise CallbackNotFound("no wait is waiting for this callback token")
    same = mine is not None and detail.get("body") == digest and action is not Action.HEARTBEAT
    if not same:
        log.info("callback.refused", recorded=None if mine is None else mine.outcome.value)
        raise WaitEnded(ended_reason(ex, tok, mine))
    assert record is not None
    fresh = parts.store.get_execution(ex.id) or ex
    here = fresh.current_step == tok.step and fresh.attempt == tok.attempt and not fresh.terminal
    kept = here and fresh.status is Status.BLOCKED
    if action is Action.SUCCEED and here and not kept and spec is not None:
        log.info("callback.roll_forward")
        _advance(parts, fresh, spec, _callback_step(spec, tok)[0], record.result)
    log.info("callback.repeat", kept=kept)
    return Completion(ex.id, tok.step, tok.attempt, action, repeat=True, kept=kept)


__all__ = [
    "Action",
    "Completion",
    "CompletionVerdict",
    "Token",
    "check_completion",
    "complete",
    "ended_reason",
    "issue",
    "parse",
]
