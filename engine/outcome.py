"""What handling a message did, as the worker reports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from engine import transitions as tr


class OutcomeStatus(StrEnum):
    COMPLETED_STEP = "completed_step"  # the step committed and the execution moved on
    RETRY_SCHEDULED = "retry_scheduled"  # the attempt failed; the next one is scheduled
    FAILED = "failed"  # the execution failed for good (and is parked in the DLQ)
    WOKE = "woke"  # a sleep ended and the execution moved on
    STALE = "stale"  # nothing to do: the execution moved past the message, or a race was lost
    EARLY = "early"  # the message came before its time
    ORPHAN = "orphan"  # the execution does not exist
    IN_FLIGHT = "in_flight"  # another runner holds this attempt
    CHAIN_BROKEN = "chain_broken"  # a chained link failed; it was handed back to the queue
    WAITING = "waiting"  # the execution waits on the outside world (callback, signal, child)
    NOT_YET = "not_yet"  # a poll's check said not yet; the same attempt runs again later
    COMPENSATING = "compensating"  # the execution failed (or was cancelled): its compensations run
    FANNED_OUT = "fanned_out"  # a fan-out step sent (or re-sent) its items; they run on their own
    ITEM_DONE = "item_done"  # an item of a fan-out step is final; the join is not decided yet
    BLOCKED = "blocked"  # no registered definition matches the execution's: nothing ran (engine/definitions.py)
    NO_TIME = "no_time"  # the step needs more time than the invocation has left; not started


@dataclass(frozen=True)
class Outcome:
    """What handling one message (and the chain it started) did."""

    status: OutcomeStatus
    steps_run: int = 0


@dataclass(frozen=True)
class LinkResult:
    """What one link of a chain did: its status, how many step bodies ran, what follows."""

    status: OutcomeStatus
    ran: int = 0
    effects: tr.Effects = field(default_factory=tr.Effects)
