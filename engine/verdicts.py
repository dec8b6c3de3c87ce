"""Check, then act: what a step message means, decided without I/O.

The runner reads the execution (and, for a guarded run, the step's history record),
asks these functions what to do, and carries the verdict out. Every branch of the
message protocol is here, so the unit tests can walk all of them without moto.

    record of a batch ──► check_record ──► HOLD_BACK (send a copy, acknowledge it) | START:
    message ──► check_message ──► ORPHAN | STALE                  (acknowledge, nothing written)
                      │           ADOPT ──► as the sweeper's redrive of the current attempt
                      │                     (StepMessage.redrive_of), carried on from the top
                      │           EARLY                           (send it back for when it is due)
                      │           WAKE                            (finish the sleep)
                      │           RUN ──► has_time? no: hand the message back, nothing written
                      │                   unguarded: run the step
                      │            └────► guarded: check_guard ──► ROLL_FORWARD | IN_FLIGHT
                      │                                            WORKER_LOST  | MARK_AND_RUN
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from engine.config import EngineConfig
from engine.messages import MessageKind, StepMessage
from engine.state import Execution, Status, StepRecord, StepStatus


class MessageVerdict(StrEnum):
    ORPHAN = "orphan"  # no such execution (deleted, or never created)
    STALE = "stale"  # the execution has moved past what the message points at
    # A redelivered message the execution has moved past and that has been quiet since: the
    # invocation that had it died before it sent the next message (``may_adopt``).
    ADOPT = "adopt"
    EARLY = "early"  # it points at the right place, but before its ready or wake time
    WAKE = "wake"  # a sleep is over: commit it and move on
    RUN = "run"  # run the current attempt of the current step


class RecordVerdict(StrEnum):
    START = "start"  # handle the record in this invocation
    HOLD_BACK = "hold_back"  # the invocation's time is nearly spent: hand it to another one


class GuardVerdict(StrEnum):
    ROLL_FORWARD = "roll_forward"  # the step is committed already: advance with that result
    IN_FLIGHT = "in_flight"  # another runner marked this attempt less than a lease ago
    WORKER_LOST = "worker_lost"  # the attempt was marked a lease or more ago: its worker died
    MARK_AND_RUN = "mark_and_run"  # record the attempt as started, then run it


class CompensationVerdict(StrEnum):
    """What a (always guarded) compensation run does, decided from both history records."""

    NOT_COMMITTED = "not_committed"  # the step never committed: nothing to undo, move on
    DONE = "done"  # the compensation is committed already: move on
    GIVE_UP = "give_up"  # a final failure of it is recorded: COMPENSATION_FAILED
    FOLLOW_RETRY = "follow_retry"  # this attempt's failure is recorded: schedule the next one
    IN_FLIGHT = "in_flight"
    WORKER_LOST = "worker_lost"
    MARK_AND_RUN = "mark_and_run"


@dataclass(frozen=True)
class MessageCheck:
    verdict: MessageVerdict
    # When EARLY: the time the message should have arrived at, and the delay to send it
    # back with (None when that is past SQS's longest delay: the due index holds it).
    due_at: float | None = None
    resend_in: int | None = None


@dataclass(frozen=True)
class GuardCheck:
    verdict: GuardVerdict
    # When IN_FLIGHT or WORKER_LOST: when the attempt was marked started.
    marked_at: float | None = None


def points_at(msg: StepMessage, ex: Execution) -> bool:
    """Whether the message still addresses the execution's current position."""
    if msg.kind is MessageKind.WAKE:
        return ex.status is Status.SLEEPING and ex.current_step == msg.step
    if ex.status is Status.COMPENSATING:
        # Only the compensation's own messages (and their retries and redrives) run it.
        undo_kinds = (MessageKind.COMPENSATE, MessageKind.RETRY, MessageKind.REDRIVE)
        return msg.kind in undo_kinds and ex.current_step == msg.step and ex.attempt == msg.attempt
    if msg.kind is MessageKind.COMPENSATE:
        return False
    if msg.kind is MessageKind.CHILD_DONE:
        # The parent may not have parked yet when its child ends (engine/children.py).
        live = ex.status in (Status.RUNNING, Status.WAITING)
        return live and ex.current_step == msg.step and ex.attempt == msg.attempt
    return ex.status is Status.RUNNING and ex.current_step == msg.step and ex.attempt == msg.attempt


def check_message(
    msg: StepMessage, ex: Execution | None, now: float, cfg: EngineConfig, *, redelivered: bool = False
) -> MessageCheck:
    if ex is None:
        return MessageCheck(MessageVerdict.ORPHAN)
    if not points_at(msg, ex):
        if may_adopt(msg, ex, now, cfg, redelivered=redelivered):
            return MessageCheck(MessageVerdict.ADOPT)
        return MessageCheck(MessageVerdict.STALE)
    due_at = ex.next_wake_at if msg.kind is MessageKind.WAKE else ex.ready_at
    if msg.kind in (MessageKind.CHILD_DONE, MessageKind.ITEM):
        due_at = None  # an item's backoff is its own record's (engine/fanout.py)
    if due_at is not None and now + cfg.early_tolerance < due_at:
        # Dropping it would leave a retry to the lease; waits past SQS's limit are the sweeper's.
        wait = math.ceil(due_at - now)
        return MessageCheck(MessageVerdict.EARLY, due_at=due_at, resend_in=wait if wait <= cfg.max_sqs_delay else None)
    if msg.kind is MessageKind.WAKE:
        return MessageCheck(MessageVerdict.WAKE)
    return MessageCheck(MessageVerdict.RUN)


#: The kinds of message whose redelivery may adopt the execution's current attempt: the ones
#: that run forward steps. A wake, a child's end notice, an item or a compensation has its own
#: recovery (the sweeper, the fan-out's join, the compensation's guard).
ADOPTING_KINDS = frozenset({MessageKind.STEP, MessageKind.RETRY, MessageKind.REDRIVE})


def may_adopt(msg: StepMessage, ex: Execution, now: float, cfg: EngineConfig, *, redelivered: bool) -> bool:
    """Whether a stale message proves that the execution's current attempt has no runner.

    SQS delivers a message again only when the invocation that received it neither deleted it
    nor kept extending its visibility (engine/batch.py's heartbeat): it died, with its batch.
    If the execution has moved past the message, that invocation moved it (a checkpoint, or a
    chain's links) and then died before it sent the next message or while it ran the next link.
    Nothing else runs the current attempt: the message that would run it was never sent. So the
    redelivery runs it at once, guarded, instead of leaving it to the lease and the sweeper's
    next tick (one to two leases and a tick later).

    ``adopt_quiet_seconds`` (no write for that long) tells a dead chain from a live one whose
    heartbeat merely failed: a live chain writes at every step. A live runner of a long step
    may still be there; the guarded run then marks the attempt, and the two runs are the
    duplicate at_least_once allows (an at_most_once attempt is marked before it runs, so the
    guard finds it in flight instead).
    """
    return (
        redelivered
        and msg.kind in ADOPTING_KINDS
        and ex.status is Status.RUNNING
        and ex.catching is None
        and (msg.step, msg.attempt) < (ex.current_step, ex.attempt)
        and now - ex.updated_at >= cfg.adopt_quiet_seconds
    )


def lapse_wait(marked_at: float, now: float, cfg: EngineConfig) -> int | None:
    """Seconds until an attempt marked at ``marked_at`` may be judged lost (its lease is out),
    as a message delay; None when that is past SQS's longest delay (the sweeper judges it)."""
    wait = max(1, math.ceil(marked_at + cfg.lease_seconds - now + cfg.early_tolerance))
    return wait if wait <= cfg.max_sqs_delay else None


def has_time(remaining: float | None, timeout: float, reserve: float) -> bool:
    """Whether a step that may run ``timeout`` seconds can start with ``remaining`` seconds left.

    A step killed by the invocation's timeout counts as a lost worker (a failed attempt for
    ``at_most_once``), so it starts only with its whole timeout plus the reserve ahead of it.
    An unknown deadline (None: no Lambda context) holds nothing back.
    """
    return remaining is None or remaining >= timeout + reserve


def check_record(
    remaining: float | None, *, first: bool, budget: float | None, slowest: float, cfg: EngineConfig
) -> RecordVerdict:
    """Whether a batch's record starts in this invocation, whatever its step declares.

    An invocation killed by its timeout returns its whole batch: every record it had not
    finished comes back with one more receive, and SQS parks a message in the DLQ after
    ``maxReceiveCount`` of those. So a record after the first starts only with
    ``record_reserve`` plus the longest record so far (``slowest``, the best guess of what
    the next one costs) left. The first record always starts: it has the whole invocation,
    and holding it back would only pass it from invocation to invocation. (A step with a
    declared ``timeout`` is also checked against it by the runner: ``has_time``.) An
    unknown deadline (None: no Lambda context) holds nothing back.
    """
    if remaining is None or budget is None or first:
        return RecordVerdict.START
    if remaining >= record_reserve(budget, cfg) + slowest:
        return RecordVerdict.START
    return RecordVerdict.HOLD_BACK


def record_reserve(budget: float, cfg: EngineConfig) -> float:
    """Time kept back from a batch's next record: the chain reserve, or a share of the
    invocation (its time left when the batch began) when that is less, as it is under a short
    worker timeout (the chaos kit's 10 s would otherwise hold back every record but the first)."""
    return min(cfg.chain_reserve_seconds, cfg.record_reserve_fraction * budget)


def requeued(msg: StepMessage, *, redelivered: bool) -> StepMessage:
    """The copy of a held-back record sent for another invocation.

    The copy arrives as a first delivery; a record that was a redelivery ran guarded
    (something may have run it before), so its copy asks for the guard by its kind.
    """
    if redelivered and msg.kind is MessageKind.STEP:
        return replace(msg, kind=MessageKind.REDRIVE)
    return msg


def needs_guard(msg: StepMessage, *, redelivered: bool, at_most_once: bool, covered: bool = True) -> bool:
    """A run is guarded when something may have gone wrong before it, or the step asks,
    or the run is not ``covered`` (see ``run_is_covered``)."""
    return redelivered or msg.needs_guard or at_most_once or not covered


def run_is_covered(ex: Execution, now: float, cfg: EngineConfig) -> bool:
    """Whether an unguarded run is safe: the lease still covers a whole run, and no
    runner has marked this attempt started.

    A message that waited in the queue (a backlog) until its lease nearly lapsed may
    have been re-driven by the sweeper already; a run that started unguarded then could
    overlap the redrive's. So such a run is guarded: its start mark renews the lease and
    serialises it with any other runner of the attempt. That write is paid only by late
    messages; a chained link or a promptly received message finds at least a lease left.
    """
    if ex.started_attempt == ex.attempt:
        return False
    return ex.next_wake_at is not None and ex.next_wake_at - now > cfg.lease_seconds


def check_guard(ex: Execution, record: StepRecord | None, now: float, cfg: EngineConfig) -> GuardCheck:
    """A guarded run: look at the history and the start mark before running anything."""
    if record is not None and record.status is StepStatus.COMPLETED:
        return GuardCheck(GuardVerdict.ROLL_FORWARD)
    if ex.started_attempt != ex.attempt:
        return GuardCheck(GuardVerdict.MARK_AND_RUN)
    marked_at = ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at
    if now < marked_at + cfg.lease_seconds:
        # Running or failing it now could overlap a live attempt (a duplicate, or a
        # redelivery after a short visibility timeout); the lease covers a real death.
        return GuardCheck(GuardVerdict.IN_FLIGHT, marked_at=marked_at)
    return GuardCheck(GuardVerdict.WORKER_LOST, marked_at=marked_at)


def check_compensation(
    ex: Execution, forward: StepRecord | None, record: StepRecord | None, now: float, cfg: EngineConfig
) -> tuple[CompensationVerdict, float | None]:
    """A compensation run: the forward record decides whether there is anything to undo,
    its own record (``STEP#<nnn>#<name>#compensate``) whether it is done or recorded;
    the start mark and the lease then rule as for a guarded forward step."""
    if forward is None or forward.status is not StepStatus.COMPLETED:
        return CompensationVerdict.NOT_COMMITTED, None
    if record is not None and record.status is StepStatus.COMPLETED:
        return CompensationVerdict.DONE, None
    if record is not None and record.status is StepStatus.FAILED:
        return CompensationVerdict.GIVE_UP, None
    if record is not None and record.attempts and max(a.attempt for a in record.attempts) >= ex.attempt:
        return CompensationVerdict.FOLLOW_RETRY, None
    guard = check_guard(ex, None, now, cfg)
    return CompensationVerdict(guard.verdict.value), guard.marked_at
