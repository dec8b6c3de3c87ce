"""Durable polling (``wait_until``): a check that says not yet runs again later, and nothing runs between.

    RUNNING(step i, attempt a) ──check(ctx[, state])──► result ──► commit + advance (as any step)
           ▲                      └──► NOT_YET / not_yet(state) ──► one write: same attempt,
           │                             ready_at = now + the strategy's delay, wait.polls + 1,
           │                             wait.checkpoint = {state: what the next check gets}
           └──── delayed message (<= 15 min) or the sweeper (longer) ──┘
    past wait.deadline: the attempt fails with PollTimeout; at max_checks with PollExhausted,
    both through the step's retry policy (engine/poll_plan.py decides).

The deadline is set by the attempt's first check and kept, with the check count and the
checkpoint, in the execution's ``wait``: that one conditional write is the checkpoint between
two checks. A retry is a new attempt: a fresh deadline and count, but the state the last
not-yet checkpointed (``transitions.carried_wait``), so a check that raised, or a worker lost
mid-check, never throws the poll's progress away. A catch round or a redrive starts from
``initial_state``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from engine import transitions as tr
from engine.attempts import fail_attempt
from engine.errors import ConflictError, InvalidResult, LoomError, PollExhausted, PollTimeout, ResultTooLarge
from engine.limits import check_item, meta_item_size, utf8_len
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.poll_plan import PollNext, PollVerdict, judge_not_yet
from engine.state import AttemptOutcome, Execution, Wait, WaitKind, canonical_json
from engine.workflow import NOT_YET, NotYet, PollSpec, StepContext, StepSpec, WorkflowSpec


def _poll_here(ex: Execution) -> Wait | None:
    w = ex.wait
    return w if w is not None and w.kind is WaitKind.POLL and w.step == ex.current_step else None


def poll_wait(ex: Execution, st: PollSpec, now: float) -> Wait:
    """This attempt's poll: the one the execution holds, or a fresh count and deadline from its
    first check (with the checkpoint an earlier attempt of the step left, if any)."""
    w = _poll_here(ex)
    if w is not None and w.attempt == ex.attempt:
        return w
    deadline = None if st.wait_timeout is None else now + st.wait_timeout
    kept = None if w is None else w.checkpoint
    return Wait(WaitKind.POLL, ex.current_step, ex.attempt, name=st.name, deadline=deadline, checkpoint=kept)


def current_state(ex: Execution, st: PollSpec) -> Any:
    """What the next check gets: a fresh copy of the checkpointed state, else ``initial_state``."""
    w = _poll_here(ex)
    if w is None or w.checkpoint is None:
        return st.initial_state()
    return json.loads(canonical_json(w.checkpoint.get("state")))


def check(ex: Execution, st: PollSpec, ctx: StepContext) -> Any:
    """Run the check, with the state if the poll has one."""
    if st.stateful:
        return st.fn(ctx, current_state(ex, st))  # type: ignore[call-arg]
    return st.fn(ctx)


def said_not_yet(raw: Any) -> bool:
    return raw is NOT_YET or isinstance(raw, NotYet)


def next_state(ex: Execution, st: StepSpec, raw: Any) -> Any:
    """The state to checkpoint: the check's ``not_yet(state)``, or the one it got (``NOT_YET``)."""
    if not isinstance(st, PollSpec):
        raise InvalidResult("NOT_YET may only be returned by a wait_until check")
    if not st.stateful:
        if isinstance(raw, NotYet):
            raise InvalidResult(f"poll {st.name!r} has no state: not_yet(state) needs wait_until(initial_state=...)")
        return None
    state = raw.state if isinstance(raw, NotYet) else current_state(ex, st)
    try:
        stored = canonical_json(state)
    except (TypeError, ValueError) as exc:
        raise InvalidResult(f"the state of poll {st.name!r} is not JSON-serialisable: {exc}") from exc
    size = meta_item_size(canonical_json(ex.input), canonical_json(ex.context)) + utf8_len(stored)
    try:
        check_item(size, f"the state of poll {st.name!r}")
    except LoomError as exc:
        raise ResultTooLarge(exc.message) from exc
    return json.loads(stored)


def exhausted(st: PollSpec, plan: PollNext) -> PollExhausted:
    if plan.verdict is PollVerdict.TIMED_OUT:
        return PollTimeout(f"{st.name!r} still said not yet after {plan.checks} checks")
    return PollExhausted(f"{st.name!r} still said not yet after {plan.checks} checks (max_checks={st.max_checks})")


def not_yet(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec, raw: Any, *, started_at: float
) -> LinkResult:
    """The check said not yet: checkpoint its state and schedule the next check, or fail the bound."""
    now = parts.clock.now()
    log = execution_log(ex).bind(step_name=st.name)
    try:
        state = next_state(ex, st, raw)
    except (InvalidResult, ResultTooLarge) as exc:
        return fail_attempt(parts, ex, spec, st, exc, started_at=started_at, outcome=AttemptOutcome.FAILED)
    assert isinstance(st, PollSpec)
    wait = poll_wait(ex, st, now)
    plan = judge_not_yet(ex.id, wait, st, now)
    if plan.verdict is not PollVerdict.AGAIN:
        error = exhausted(st, plan)
        return fail_attempt(parts, ex, spec, st, error, started_at=started_at, outcome=AttemptOutcome.FAILED)
    checkpoint = {"state": state} if st.stateful else None
    wait = replace(wait, polls=plan.checks, checkpoint=checkpoint)
    new, effects = tr.not_yet_state(ex, wait, plan.delay, now, parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        log.info("poll.not_yet_lost")
        return LinkResult(OutcomeStatus.STALE, 1)
    via = "queue" if effects.delayed else "sweeper"
    log.info("poll.not_yet", polls=wait.polls, delay=round(plan.delay, 3), ready_at=new.ready_at, via=via)
    return LinkResult(OutcomeStatus.NOT_YET, 1, effects)
