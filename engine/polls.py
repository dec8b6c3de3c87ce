"""Durable polling (``wait_until``): a check that says not yet runs again later, and nothing runs between.

    RUNNING(step i, attempt a) ──check──► result ──► commit + advance (as any step)
           ▲                      └────► NOT_YET ──► one write: same attempt, ready_at = now + every,
           └──── delayed message (every <= 15 min) or the sweeper (longer) ──┘   wait.polls + 1
    past wait.deadline: the attempt fails with PollTimeout, through the step's retry policy.

The deadline is set by the attempt's first check and kept in the execution's ``wait``;
a retry is a new attempt, so it gets a fresh deadline.
"""

from __future__ import annotations

from dataclasses import replace

from engine import transitions as tr
from engine.attempts import fail_attempt
from engine.errors import ConflictError, InvalidResult, PollTimeout
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.state import AttemptOutcome, Execution, Wait, WaitKind
from engine.workflow import PollSpec, StepSpec, WorkflowSpec


def poll_wait(ex: Execution, st: PollSpec, now: float) -> Wait:
    """This attempt's poll state: the one the execution holds, or a fresh one from its first check."""
    w = ex.wait
    if w is not None and w.kind is WaitKind.POLL and w.step == ex.current_step and w.attempt == ex.attempt:
        return w
    deadline = None if st.wait_timeout is None else now + st.wait_timeout
    return Wait(WaitKind.POLL, ex.current_step, ex.attempt, name=st.name, deadline=deadline)


def not_yet(parts: Parts, ex: Execution, spec: WorkflowSpec, st: StepSpec, *, started_at: float) -> LinkResult:
    now = parts.clock.now()
    log = execution_log(ex).bind(step_name=st.name)
    if not isinstance(st, PollSpec):
        bad = InvalidResult("NOT_YET may only be returned by a wait_until check")
        return fail_attempt(parts, ex, spec, st, bad, started_at=started_at, outcome=AttemptOutcome.FAILED)
    wait = poll_wait(ex, st, now)
    if wait.deadline is not None and now >= wait.deadline:
        timeout = PollTimeout(f"{st.name!r} still said not yet after {wait.polls + 1} checks")
        return fail_attempt(parts, ex, spec, st, timeout, started_at=started_at, outcome=AttemptOutcome.FAILED)
    wait = replace(wait, polls=wait.polls + 1)
    new, effects = tr.not_yet_state(ex, wait, st.every, now, parts.config)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        log.info("poll.not_yet_lost")
        return LinkResult(OutcomeStatus.STALE, 1)
    log.info("poll.not_yet", polls=wait.polls, ready_at=new.ready_at, via="queue" if effects.delayed else "sweeper")
    return LinkResult(OutcomeStatus.NOT_YET, 1, effects)
