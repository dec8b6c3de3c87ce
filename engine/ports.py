"""The engine's ports: what it needs from storage, the queue and fault injection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from engine.join import JoinRecord
from engine.messages import StepMessage
from engine.state import Attempt, Execution, Handle, ScheduleCursor, Signal, StepRecord


@dataclass(frozen=True)
class Page:
    items: list[Execution]
    cursor: str | None


@dataclass(frozen=True)
class Stamped:
    """One ``Store.retain`` call: items written, and whether every item now carries the expiry."""

    written: int
    finished: bool


class Store(Protocol):
    """Conditional persistence.

    Every write that lost its condition to another writer raises ``ConflictError``,
    whose ``current`` holds the winning item (``Execution`` or ``StepRecord``) when the
    store has it. A write that landed is a success even if its answer was lost and the
    client's retry found the condition failed: the store tells its own earlier try from
    another writer's (DESIGN.md, "Write tokens").
    """

    def create_execution(self, execution: Execution) -> None:
        """Insert; ``ConflictError`` (``current``: the existing execution) if the id exists."""

    def get_execution(self, execution_id: str) -> Execution | None: ...

    def put_execution(self, execution: Execution, *, expected_version: int, expected_step: int) -> None:
        """Replace, only if the stored item is still at (expected_step, expected_version)."""

    def commit_step(
        self, execution_id: str, index: int, name: str, attempt: Attempt, result: dict[str, Any] | None
    ) -> None:
        """Record the step COMPLETED with its result.

        ``ConflictError`` (``current``: the record) if it already is, or if this attempt
        number (or a later one) is recorded already.
        """

    def record_failure(self, execution_id: str, index: int, name: str, attempt: Attempt, *, final: bool) -> bool:
        """Append a failed attempt; False if that attempt number was already recorded."""

    def get_step(self, execution_id: str, index: int, name: str) -> StepRecord | None: ...

    def history(self, execution_id: str) -> list[StepRecord]: ...

    def put_signal(self, signal: Signal) -> None:
        """Keep a signal; ``PayloadTooLarge`` if it cannot fit one item."""

    def next_signal(self, execution_id: str, name: str) -> Signal | None:
        """The oldest signal of ``name`` no wait has consumed yet."""

    def get_signal(self, execution_id: str, name: str, key: str) -> Signal | None: ...

    def signals(self, execution_id: str) -> list[Signal]:
        """Every signal kept for the execution, consumed or not."""

    def consume_signal(self, execution_id: str, name: str, key: str, by: str) -> None:
        """Mark it consumed by ``by`` (idempotent); ``ConflictError`` if another wait took it."""

    # callback handles (engine/handles.py)
    def create_handle(self, handle: Handle) -> Handle:
        """Keep a new handle; if one is there for its step already, that one (unchanged)."""

    def get_handle(self, execution_id: str, step: int) -> Handle | None: ...

    def put_handle(self, handle: Handle, *, expected_version: int) -> None:
        """Replace the handle if its stored version is ``expected_version``; ``ConflictError`` if not."""

    def due(self, shard: int, now: float, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        """Ids of executions in ``shard`` whose next_wake_at <= now, oldest first."""

    def list_executions(self, *, status: str | None, workflow: str | None, limit: int, cursor: str | None) -> Page: ...

    def note_parked(self, count: int, now: float) -> float:
        """Record the dead-letter queue's message count a sweep saw; since when the stored count
        has been ``count`` (``now`` when it changed, or when two sweeps raced to change it)."""

    # retention (engine/retention.py)
    def retain(self, execution_id: str, expires_at: float | None, limit: int) -> Stamped:
        """Give each item of the execution but the execution item itself this ``expires_at``
        (None: none), at most ``limit`` writes; idempotent, so a next call finishes the rest."""

    # schedules (engine/schedules.py): one cursor per scheduled workflow
    def schedules(self) -> list[ScheduleCursor]:
        """Every schedule cursor, read consistently, by workflow name."""

    def put_schedule(self, cursor: ScheduleCursor, *, expected_version: int | None) -> None:
        """Create (``expected_version`` None: only if absent) or replace the cursor at that version;
        ``ConflictError`` (``current``: the stored cursor) otherwise."""

    def delete_schedule(self, workflow: str, *, expected_version: int) -> None:
        """Delete the cursor if it is still at that version; ``ConflictError`` otherwise."""

    # fan-out (engine/fanout.py): one join record per fan-out step, one record per item
    def open_join(self, join: JoinRecord) -> JoinRecord:
        """Create the join record unless it exists; the record as stored either way."""

    def get_join(self, execution_id: str, step: int) -> JoinRecord | None: ...

    def decide_join(self, execution_id: str, step: int, decided: str) -> str:
        """Record the join's outcome unless one is recorded; the outcome as stored."""

    def get_item(self, execution_id: str, step: int, idx: int, shards: int) -> StepRecord | None:
        """Item ``idx``'s record (``index`` is the item's index, ``name`` the step's)."""

    def commit_item(
        self,
        execution_id: str,
        step: int,
        name: str,
        idx: int,
        shards: int,
        attempt: Attempt,
        result: Any,
        *,
        chain_end: bool = False,
        label: str | None = None,
    ) -> None:
        """Item COMPLETED with its result, and the join's ``ok`` counted, in one transaction.
        ``label``: the item's name (a map's ``item_namer``), stored by the same write.

        ``ConflictError`` (``current``: the item record) under the step-history rules.
        """

    def fail_item(
        self,
        execution_id: str,
        step: int,
        name: str,
        idx: int,
        shards: int,
        attempt: Attempt,
        *,
        final: bool,
        chain_end: bool = False,
        label: str | None = None,
    ) -> bool:
        """Append a failed attempt (final: FAILED and the join's ``failed`` counted, in one
        transaction); False if the history rules refuse it. ``chain_end``: the item is the last
        of its slot, and the join's ``ends`` is counted with it."""

    def decline_item(self, execution_id: str, step: int, name: str, idx: int, shards: int) -> bool:
        """Record item ``idx`` NOT_STARTED and count the join's ``declined``, in one transaction,
        if the item has no record and the join is not decided; False otherwise."""

    def fan_items(self, execution_id: str, step: int, shards: int, start: int, count: int) -> list[StepRecord]:
        """The records of items ``start .. start+count-1`` that exist, in item order."""


class Queue(Protocol):
    def send(self, message: StepMessage, delay_seconds: int = 0) -> None: ...

    def send_many(self, messages: Sequence[StepMessage]) -> None: ...

    def send_dead_letter(self, body: dict[str, Any]) -> None: ...

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None: ...

    def change_visibility_many(self, receipt_handles: Sequence[str], timeout_seconds: int) -> list[str]:
        """Change several messages' visibility in as few calls as the queue allows (SQS: ten a
        call); the receipt handles it could not change. Raises as ``change_visibility``."""

    def backlog(self) -> int:
        """Messages waiting in the step queue to be received: visible, not in flight, not delayed.

        SQS's figure is approximate (it may lag the queue by a minute). Raises
        ``TransientError`` when the queue cannot be asked.
        """

    def parked(self) -> int:
        """Messages in the dead-letter queue (visible or not): the engine's failure records and
        step messages SQS moved there after ``maxReceiveCount``. Approximate, as ``backlog``;
        raises ``TransientError`` when the queue cannot be asked.
        """


class Faults(Protocol):
    """Named points where chaos tests may crash the worker. Inert in production."""

    def point(self, name: str, **info: Any) -> None: ...


class NoFaults:
    def point(self, name: str, **info: Any) -> None:
        return None


class FaultPoint(StrEnum):
    """Where the engine offers the ``Faults`` port a chance to crash the worker."""

    BEFORE_STEP = "before_step"  # the attempt is about to run (guard marks written)
    AFTER_STEP = "after_step"  # the step ran; its result is not committed yet
    AFTER_CHECKPOINT = "after_checkpoint"  # the execution moved on; the next message is not sent
    AFTER_ENQUEUE = "after_enqueue"  # the next message is sent; this invocation is not done


FAULT_POINTS: tuple[str, ...] = tuple(p.value for p in FaultPoint)
