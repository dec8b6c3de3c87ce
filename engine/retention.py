"""Retention: every item an ended execution left expires with it.

DynamoDB's TTL deletes items one by one and knows nothing of executions, so each item carries
the expiry itself (``expires_at``, the table's TTL attribute). The rule (DESIGN.md, "Retention"):

1. the ending write sets the execution item's ``expires_at`` (end + ``retention_seconds``) and
   keeps it in GSI1 for ``end_grace_seconds`` (``transitions.ended``): no extra write;
2. past the grace no write of an attempt that was still running at the end can land (a worker's
   invocation is shorter), so the sweeper stamps every other item with the same expiry and only
   then un-indexes the execution; a sweep that dies half-way leaves it due, and the next one skips
   what is stamped already;
3. a redrive makes an ended execution run again: it takes the stamps away (``unstamp``), so that
   TTL never deletes the records of a running execution;
4. readers hide an execution once ``expires_at`` has passed (``Execution.expired``), since TTL
   deletes it only some time later (typically within days).
"""

from __future__ import annotations

from enum import StrEnum

from engine.log import get_logger
from engine.parts import Parts
from engine.state import Execution

# Stamps one sweep writes for one execution: a 10,000-item map is stamped over several ticks
# instead of one sweep spending the table's write capacity (and its own time) on it.
STAMP_LIMIT = 500


class RetainVerdict(StrEnum):
    STAMP = "stamp"  # retention on: stamp the other items, then leave GSI1
    LEAVE = "leave"  # kept for ever (retention off when it ended): leave GSI1 only


def verdict(ex: Execution) -> RetainVerdict:
    return RetainVerdict.STAMP if ex.terminal and ex.expires_at is not None else RetainVerdict.LEAVE


def stamp(parts: Parts, ex: Execution, limit: int = STAMP_LIMIT) -> bool:
    """Carry out rule 2 for an ended execution; True once every item carries its expiry."""
    if verdict(ex) is RetainVerdict.LEAVE:
        return True
    done = parts.store.retain(ex.id, ex.expires_at, limit)
    log = get_logger(execution_id=ex.id, step=None, attempt=None)
    log.info("retention.stamped", items=done.written, finished=done.finished, expires_at=ex.expires_at)
    return done.finished


def unstamp(parts: Parts, ex: Execution) -> None:
    """Rule 3, after the redrive's write: its items are kept until it ends again."""
    while not parts.store.retain(ex.id, None, STAMP_LIMIT).finished:
        pass
