"""Pure state transitions: an execution and an outcome in, the next execution out.

Nothing here performs I/O; ``engine.runtime`` writes what these return with a
condition on the version they started from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from engine.config import EngineConfig
from engine.messages import MessageKind, StepMessage
from engine.state import Execution, Status, Wait, WaitKind
from engine.workflow import SleepSpec, StepSpec, WorkflowSpec


@dataclass(frozen=True)
class Effects:
    """What to do once the new state is durable."""

    run_next: StepMessage | None = None  # runnable now: chain it or enqueue it
    delayed: tuple[StepMessage, int] | None = None  # enqueue with DelaySeconds
    # The state the runtime just wrote, exactly as stored: the next link of a chain
    # starts from it instead of reading the item back.
    written: Execution | None = None


def lease(ex: Execution | None, now: float, cfg: EngineConfig, base: float | None = None) -> float:
    """next_wake_at for a RUNNING execution.

    Keeping an unexpired lease means no write to the due index on most steps. A lease
    is kept only while more than one and a half leases (plus ``early_tolerance``) are
    left, so the step that runs next still finds a whole lease ahead
    (``verdicts.run_is_covered``) even after its message waited up to half a lease in the
    queue: renewing here moves only the due index, where a start mark later would cost a
    write to the table as well.

    Both figures move on by ``queue_ahead``: the message this state sends will likely wait
    in the queue as long as the one being handled did. Without it, behind a backlog longer
    than a lease every message arrived uncovered (a start mark each) and the sweeper found
    every lease lapsed first (a read and a postponement each, several per step).
    """
    ahead = queue_ahead(cfg)
    start = now if base is None else max(now, base)
    if (
        ex is not None
        and base is None
        and ex.status is Status.RUNNING
        and ex.next_wake_at is not None
        and ex.next_wake_at - now >= 1.5 * cfg.lease_seconds + cfg.early_tolerance + ahead
    ):
        return ex.next_wake_at
    return start + 2 * cfg.lease_seconds + ahead


def queue_ahead(cfg: EngineConfig) -> float:
    """How much later a lease ends for the queue's observed wait (``cfg.queue_wait``).

    Never so much that the lease outlasts the sweeper's patience with a backlog
    (``backlog_patience_leases`` from now): a message lost after a long wait is re-driven
    at most that late, as it would be behind a backlog anyway.
    """
    most = max(0.0, (cfg.backlog_patience_leases - 2) * cfg.lease_seconds)
    return min(cfg.queue_wait, most)


def merge_context(context: dict[str, Any], result: dict[str, Any] | None) -> dict[str, Any]:
    return {**context, **(result or {})}


def after_step(
    ex: Execution, spec: WorkflowSpec, result: dict[str, Any] | None, now: float, cfg: EngineConfig
) -> tuple[Execution, Effects]:
    """Step ``ex.current_step`` (a step or a finished sleep) is committed: move on."""
    context = merge_context(ex.context, result)
    nxt = ex.current_step + 1
    common = {
        "context": context,
        "attempt": 1,
        "attempt_base": 0,
        "started_attempt": 0,
        "ready_at": None,
        "wait": None,
        "catching": None,
    }
    if nxt >= len(spec.steps):
        done = ex.evolve(now, status=Status.COMPLETED, current_step=nxt, **ended(ex, now, cfg), **common)
        return done, Effects()
    following = spec.steps[nxt]
    if isinstance(following, SleepSpec):
        wake_at = now + following.seconds
        new = ex.evolve(now, status=Status.SLEEPING, current_step=nxt, next_wake_at=wake_at, **common)
        delayed = None
        if following.seconds <= cfg.max_sqs_delay:
            delayed = (StepMessage(ex.id, nxt, 1, MessageKind.WAKE), math.ceil(following.seconds))
        return new, Effects(delayed=delayed)
    new = ex.evolve(now, status=Status.RUNNING, current_step=nxt, next_wake_at=lease(ex, now, cfg), **common)
    return new, Effects(run_next=StepMessage(ex.id, nxt, 1, MessageKind.STEP))


def start_state(ex: Execution, spec: WorkflowSpec, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """The first state of a new execution (version 1), with the shape of the definition it runs on."""
    ex = replace(ex, fingerprint=spec.fingerprint, workflow_version=spec.version)
    first = spec.steps[0]
    if isinstance(first, SleepSpec):
        wake_at = ex.created_at + first.seconds
        new = replace(ex, status=Status.SLEEPING, next_wake_at=wake_at)
        delayed = (
            (StepMessage(ex.id, 0, 1, MessageKind.WAKE), math.ceil(first.seconds))
            if first.seconds <= cfg.max_sqs_delay
            else None
        )
        return new, Effects(delayed=delayed)
    new = replace(ex, status=Status.RUNNING, next_wake_at=lease(None, ex.created_at, cfg))
    return new, Effects(run_next=StepMessage(ex.id, 0, 1, MessageKind.STEP))


def carried_wait(ex: Execution) -> Wait | None:
    """What a retry keeps of the current wait: a poll's checkpoint (its state), nothing else.
    The old attempt number stays on it, so the retry's first check starts a fresh count and
    deadline (``polls.poll_wait``) from the state the last not-yet wrote."""
    w = ex.wait
    if w is None or w.kind is not WaitKind.POLL or w.checkpoint is None or w.step != ex.current_step:
        return None
    return Wait(WaitKind.POLL, w.step, w.attempt, name=w.name, checkpoint=w.checkpoint)


def retry_state(ex: Execution, delay: float, now: float, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """Schedule the next attempt ``delay`` seconds from now."""
    ready = now + delay
    kept = carried_wait(ex)
    message = StepMessage(ex.id, ex.current_step, ex.attempt + 1, MessageKind.RETRY)
    if delay <= cfg.max_sqs_delay:
        # The delayed message runs it; the lease covers that message being lost.
        new = ex.evolve(
            now,
            status=Status.RUNNING,  # a failed wait retries as a step does
            wait=kept,
            attempt=ex.attempt + 1,
            started_attempt=0,
            ready_at=ready,
            next_wake_at=lease(None, now, cfg, base=ready),
        )
        return new, Effects(delayed=(message, math.ceil(delay)))
    # Too far for SQS: the sweeper re-drives it at ready time.
    new = ex.evolve(
        now,
        status=Status.RUNNING,
        wait=kept,
        attempt=ex.attempt + 1,
        started_attempt=0,
        ready_at=ready,
        next_wake_at=ready,
    )
    return new, Effects()


def ended(ex: Execution, now: float, cfg: EngineConfig) -> dict[str, float | None]:
    """What every ending write sets besides its status: ``expires_at`` (retention's end), and
    ``next_wake_at``, the time the sweeper looks at it once more (None: it leaves GSI1).

    It stays in GSI1 for ``end_grace_seconds`` (two leases) when retention is on: the sweeper then
    stamps the execution's other items with the same expiry (engine/retention.py), after any write
    of an attempt still running at the end has landed. A child stays as long whatever the
    retention, so that the sweeper re-sends the notice to its parent if the worker died before
    sending it (engine/children.py)."""
    held = cfg.retention_seconds > 0 or ex.parent is not None
    return {
        "next_wake_at": now + cfg.end_grace_seconds if held else None,
        "expires_at": now + cfg.retention_seconds if cfg.retention_seconds > 0 else None,
    }


def failed_state(ex: Execution, error: dict[str, Any], now: float, cfg: EngineConfig) -> Execution:
    return ex.evolve(
        now, status=Status.FAILED, error=error, ready_at=None, started_attempt=0, wait=None, **ended(ex, now, cfg)
    )


def cancelled_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    return ex.evolve(
        now, status=Status.CANCELLED, ready_at=None, started_attempt=0, wait=None, blocked=None, **ended(ex, now, cfg)
    )


def started_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """Record the current attempt as started before it runs.

    Its lease covers this run, which starts now: the queue's wait (``queue_ahead``) is for the
    message a later state sends, and would only put off the sweeper's look at a dead runner."""
    ahead = lease(ex, now, replace(cfg, queue_wait=0.0))
    return ex.evolve(now, started_attempt=ex.attempt, attempt_started_at=now, next_wake_at=ahead)


def fanned_out_state(ex: Execution, now: float, cfg: EngineConfig, until: float | None = None) -> Execution:
    """A fan-out parent whose items carry it: its open's start mark is cleared, so a lapsed
    lease behind a backlog is believed like any unmarked one (``sweeper.judge_lapsed``) instead
    of taken for a dead opener; ``until`` stretches the lease past an item's retry backoff."""
    return ex.evolve(now, started_attempt=0, next_wake_at=lease(None, now, cfg, base=until))


def reclaimed_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """The sweeper takes over a RUNNING execution whose wake time has passed, to re-drive it.

    The new lease is exactly one lease: any message for this attempt received after the
    claim (the redrive, or a late original) finds less than a whole lease left, so it
    runs guarded (``verdicts.run_is_covered``) and the two cannot both run unmarked.
    """
    return ex.evolve(now, next_wake_at=now + cfg.lease_seconds)


def postponed_state(ex: Execution, now: float, cfg: EngineConfig, patience: float | None = None) -> Execution:
    """The sweeper renews a lapsed lease because the queue's backlog may hold its message.

    ``updated_at`` stays the time of the last real transition, when the message was sent:
    the sweeper's patience with a backlog counts from it. The new lease is as long as the
    message has waited so far (at least the usual two leases): behind a long backlog an
    execution then costs a write each time its wait doubles, not one every two leases (a
    thousand executions waiting behind a backlog kept the sweeper writing without pause).
    It never runs past the end of ``patience`` (seconds after the last transition), when
    the sweeper stops believing the backlog.
    """
    ahead = 2 * cfg.lease_seconds
    waited = now - ex.updated_at
    if patience is not None:
        waited = min(waited, ex.updated_at + patience - now)
    return replace(ex.evolve(now, next_wake_at=now + max(ahead, waited)), updated_at=ex.updated_at)


def redriven_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """A FAILED execution gets a fresh round of attempts at the step that failed.

    A failed catch handler is part of its step's failure: the round runs the step again
    (``catching`` cleared), and its handler only if the step fails for good again; keeping
    ``catching`` would fail the round at once on the handler's FAILED record."""
    return ex.evolve(
        now,
        status=Status.RUNNING,
        error=None,
        attempt=ex.attempt + 1,
        attempt_base=ex.attempt,
        started_attempt=0,
        ready_at=None,
        wait=None,
        catching=None,
        next_wake_at=lease(None, now, cfg),
        expires_at=None,  # running again: kept until it ends again (the redrive unstamps its items)
    )


def marked_wait_state(ex: Execution, wait: Wait, now: float, cfg: EngineConfig) -> Execution:
    """Mark the attempt started with its wait (a callback's token hash is durable before submit runs)."""
    return replace(started_state(ex, now, cfg), wait=wait)


def timing_out_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """The sweeper claims a due callback wait before recording its timeout: the wait stays,
    its wake time becomes a lease (a sweeper that dies after the claim is found again), and a
    heartbeat that finds the wake time no longer the wait's own knows the timeout has begun
    (``callbacks.heartbeat_refused``), whatever its clock says."""
    return ex.evolve(now, next_wake_at=lease(None, now, cfg))


def timing_out(ex: Execution) -> bool:
    """The sweeper has claimed this WAITING execution's timeout (``timing_out_state``)."""
    return ex.wait is not None and ex.next_wake_at != ex.wait.wake_at()


def waiting_state(ex: Execution, wait: Wait, now: float) -> Execution:
    """Park the execution on ``wait``: nothing runs until a completion or the wait's timeout."""
    return ex.evolve(now, status=Status.WAITING, wait=wait, next_wake_at=wait.wake_at(), ready_at=None)


def not_yet_state(ex: Execution, wait: Wait, delay: float, now: float, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """A poll's check said not yet: the same attempt runs again ``delay`` seconds from now,
    with ``wait`` (its check count and state) as the next check's.

    Like a retry's backoff, but the attempt number stays: a delayed message up to SQS's
    15 minutes (the lease covers its loss), the sweeper beyond that.
    """
    ready = now + delay
    if wait.deadline is not None:
        ready = min(ready, wait.deadline)
    message = StepMessage(ex.id, ex.current_step, ex.attempt, MessageKind.STEP)
    if ready - now <= cfg.max_sqs_delay:
        new = ex.evolve(
            now, wait=wait, started_attempt=0, ready_at=ready, next_wake_at=lease(None, now, cfg, base=ready)
        )
        return new, Effects(delayed=(message, math.ceil(ready - now)))
    new = ex.evolve(now, wait=wait, started_attempt=0, ready_at=ready, next_wake_at=ready)
    return new, Effects()


# ------------------------------------------------------------- saga compensation
# The protocol is engine/compensation.py; these are its state changes. While COMPENSATING,
# ``current_step`` is the step being undone, ``attempt`` the attempt of its compensation
# and ``error`` the failure (or cancel) that started it.


def compensable_below(spec: WorkflowSpec, below: int) -> int | None:
    """The latest step before ``below`` that declares a compensation (reverse order)."""
    for i in range(min(below, len(spec.steps)) - 1, -1, -1):
        s = spec.steps[i]
        if isinstance(s, StepSpec) and s.compensate is not None:
            return i
    return None


def compensating_state(
    ex: Execution, position: int, cause: dict[str, Any], now: float, cfg: EngineConfig
) -> tuple[Execution, Effects]:
    """Undo step ``position`` (first attempt), the last compensation having been done or skipped."""
    new = ex.evolve(
        now,
        status=Status.COMPENSATING,
        current_step=position,
        attempt=1,
        attempt_base=0,
        started_attempt=0,
        ready_at=None,
        wait=None,
        catching=None,  # a failed catch handler's round is over: the saga's undo takes over
        blocked=None,  # a cancel of one BLOCKED whose definition is deployed again undoes it
        error=cause,
        next_wake_at=lease(None, now, cfg),
    )
    return new, Effects(run_next=StepMessage(ex.id, position, 1, MessageKind.COMPENSATE))


def after_compensation(ex: Execution, spec: WorkflowSpec, now: float, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """The compensation of ``ex.current_step`` is committed (or had nothing to undo): the next, or COMPENSATED."""
    nxt = compensable_below(spec, ex.current_step)
    if nxt is not None:
        return compensating_state(ex, nxt, ex.error or {}, now, cfg)
    done = ex.evolve(now, status=Status.COMPENSATED, started_attempt=0, ready_at=None, **ended(ex, now, cfg))
    return done, Effects()


def compensation_retry_state(ex: Execution, delay: float, now: float, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """The next attempt of the current compensation, ``delay`` seconds from now."""
    new, effects = retry_state(ex, delay, now, cfg)
    new = replace(new, status=Status.COMPENSATING)
    if effects.delayed is None:
        return new, effects
    message, seconds = effects.delayed
    return new, replace(effects, delayed=(replace(message, kind=MessageKind.COMPENSATE), seconds))


def compensation_failed_state(ex: Execution, error: dict[str, Any], now: float, cfg: EngineConfig) -> Execution:
    return ex.evolve(
        now,
        status=Status.COMPENSATION_FAILED,
        error=error,
        ready_at=None,
        started_attempt=0,
        wait=None,
        **ended(ex, now, cfg),
    )


def catching_state(ex: Execution, error: dict[str, Any], now: float, cfg: EngineConfig) -> tuple[Execution, Effects]:
    """The current step failed for good and declares ``catch``: run its handler (engine/catching.py)
    as a new round of attempts of the same step, so every earlier attempt's message is stale."""
    new = ex.evolve(
        now,
        status=Status.RUNNING,
        attempt=ex.attempt + 1,
        attempt_base=ex.attempt,
        started_attempt=0,
        ready_at=None,
        wait=None,
        catching=error,
        next_wake_at=lease(None, now, cfg),
    )
    return new, Effects(run_next=StepMessage(ex.id, ex.current_step, ex.attempt + 1, MessageKind.STEP))


BLOCKED_FROM = frozenset({Status.RUNNING, Status.SLEEPING, Status.WAITING, Status.COMPENSATING})


def blocked_state(ex: Execution, now: float, cfg: EngineConfig, reason: str) -> Execution:
    """No registered definition matches the execution: it stops where it is, nothing run.

    Everything about its position (step, attempt, wait) is kept, so that resuming is putting
    the status back; the due index looks at it again every ``blocked_recheck_seconds``.
    """
    return ex.evolve(
        now,
        status=Status.BLOCKED,
        blocked={"reason": reason, "from": ex.status.value, "since": now},
        next_wake_at=now + cfg.blocked_recheck_seconds,
    )


def still_blocked_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """A recheck found no match yet: the next one is a recheck period away."""
    return ex.evolve(now, next_wake_at=now + cfg.blocked_recheck_seconds)


def resumed_state(ex: Execution, now: float, cfg: EngineConfig) -> Execution:
    """A matching definition is registered again: the execution goes back to what it was.

    A RUNNING or COMPENSATING one gets one lease (its redrive then runs guarded, see
    ``reclaimed_state``); a sleep is due at once (it was due when it blocked, or its wake came);
    a wait keeps its own deadline.
    """
    before = Status(ex.blocked["from"]) if ex.blocked else Status.RUNNING
    if before is Status.WAITING:
        wake = ex.wait.wake_at() if ex.wait is not None else None
    elif before is Status.SLEEPING:
        wake = now
    else:
        wake = now + cfg.lease_seconds
    return ex.evolve(now, status=before, blocked=None, next_wake_at=wake)


def migrated_state(
    ex: Execution, now: float, cfg: EngineConfig, step: int, fingerprint: str, version: int
) -> Execution:
    """A BLOCKED (RUNNING) execution moved by ``loom migrate`` onto another definition, at
    ``step``: a new round of attempts there (numbers never reused, as a redrive's), one lease
    to be re-driven."""
    return replace(
        redriven_state(ex, now, cfg),
        blocked=None,
        current_step=step,
        fingerprint=fingerprint,
        workflow_version=version,
        attempt_started_at=None,
        next_wake_at=now + cfg.lease_seconds,
    )
