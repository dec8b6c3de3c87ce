"""An in-memory ``Store`` with the same conditions as the DynamoDB adapter.

Conditional writes on (version, current_step), the step-history rules of
``engine/history_rules.py``, the due index and the item limits: a workflow test on
this store meets the protocol exactly as the table would enforce it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from engine.config import shard_of
from engine.errors import ConflictError, InvalidInput
from engine.history_rules import commit_refused_by, failure_refused_by
from engine.join import JoinRecord
from engine.limits import check_item, utf8_len
from engine.ports import Page, Stamped
from engine.state import (
    Attempt,
    Execution,
    Handle,
    ScheduleCursor,
    Signal,
    Status,
    StepRecord,
    StepStatus,
    canonical_json,
)


class InMemoryStore:
    """Implements ``engine.ports.Store`` in a dict. Not thread-safe: tests drive it from one thread."""

    def __init__(self, shards: int = 4) -> None:
        self._shards = shards
        self._executions: dict[str, Execution] = {}
        self._steps: dict[tuple[str, int, str], StepRecord] = {}
        self._signals: dict[tuple[str, str, str], Signal] = {}
        self._joins: dict[tuple[str, int], JoinRecord] = {}
        self._items: dict[tuple[str, int, int], StepRecord] = {}
        self._handles: dict[tuple[str, int], Handle] = {}
        self._parked_mark: tuple[int, float] | None = None
        self._schedules: dict[str, ScheduleCursor] = {}
        self._stamps: dict[str, float] = {}
        self.writes = 0

    # executions
    def create_execution(self, execution: Execution) -> None:
        if execution.id in self._executions:
            raise ConflictError(f"execution {execution.id!r} exists")
        self._store(execution)

    def get_execution(self, execution_id: str) -> Execution | None:
        found = self._executions.get(execution_id)
        return None if found is None else copy.deepcopy(found)

    def put_execution(self, execution: Execution, *, expected_version: int, expected_step: int) -> None:
        current = self._executions.get(execution.id)
        if current is None or current.version != expected_version or current.current_step != expected_step:
            raise ConflictError(f"conditional write on execution {execution.id!r} lost")
        self._store(execution)

    def _store(self, execution: Execution) -> None:
        size = utf8_len(canonical_json(execution.input)) + utf8_len(canonical_json(execution.context))
        size += utf8_len(canonical_json(execution.error)) if execution.error is not None else 0
        check_item(size, f"execution {execution.id!r}")
        self._executions[execution.id] = copy.deepcopy(execution)
        self.writes += 1

    # history
    def commit_step(
        self, execution_id: str, index: int, name: str, attempt: Attempt, result: dict[str, Any] | None
    ) -> None:
        record = self._steps.get((execution_id, index, name))
        rule = commit_refused_by(record, attempt.attempt)
        if rule is not None:
            raise ConflictError(f"history of step {index} refuses the commit ({rule.value})")
        base = record or StepRecord(execution_id, index, name, StepStatus.RUNNING, started_at=attempt.started_at)
        self._steps[(execution_id, index, name)] = replace(
            base,
            status=StepStatus.COMPLETED,
            attempts=(*base.attempts, attempt),
            result=copy.deepcopy(result),
            error=None,
            finished_at=attempt.finished_at,
        )
        self.writes += 1

    def record_failure(self, execution_id: str, index: int, name: str, attempt: Attempt, *, final: bool) -> bool:
        record = self._steps.get((execution_id, index, name))
        if failure_refused_by(record, attempt.attempt) is not None:
            return False
        base = record or StepRecord(execution_id, index, name, StepStatus.RUNNING, started_at=attempt.started_at)
        self._steps[(execution_id, index, name)] = replace(
            base,
            status=StepStatus.FAILED if final else StepStatus.RETRYING,
            attempts=(*base.attempts, attempt),
            error=copy.deepcopy(attempt.error),
            finished_at=attempt.finished_at if final else base.finished_at,
        )
        self.writes += 1
        return True

    def get_step(self, execution_id: str, index: int, name: str) -> StepRecord | None:
        found = self._steps.get((execution_id, index, name))
        return None if found is None else copy.deepcopy(found)

    def history(self, execution_id: str) -> list[StepRecord]:
        found = [r for (eid, _, _), r in self._steps.items() if eid == execution_id]
        return copy.deepcopy(sorted(found, key=lambda r: (r.index, r.name)))

    # fan-out: the item's write and the join's count happen together, as in the table's transaction
    def open_join(self, join: JoinRecord) -> JoinRecord:
        key = (join.execution_id, join.step)
        if key not in self._joins:
            self._joins[key] = replace(join, ok=0, failed=0, decided=None, ends=0, declined=0)
            self.writes += 1
        return self._joins[key]

    def get_join(self, execution_id: str, step: int) -> JoinRecord | None:
        return self._joins.get((execution_id, step))

    def decide_join(self, execution_id: str, step: int, decided: str) -> str:
        join = self._joins[(execution_id, step)]
        if join.decided is None:
            self._joins[(execution_id, step)] = join = replace(join, decided=decided)
            self.writes += 1
        return join.decided or decided

    def get_item(self, execution_id: str, step: int, idx: int, shards: int) -> StepRecord | None:
        return copy.deepcopy(self._items.get((execution_id, step, idx)))

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
        record = self._items.get((execution_id, step, idx))
        rule = commit_refused_by(record, attempt.attempt)
        if record is not None and record.status is StepStatus.NOT_STARTED:
            raise ConflictError(f"item {idx} was declined", current=copy.deepcopy(record))
        if self._fenced(execution_id, step):
            raise ConflictError(f"item {idx}: the join is decided", current=copy.deepcopy(record))
        if rule is not None:
            raise ConflictError(f"item {idx} refuses the commit ({rule.value})", current=copy.deepcopy(record))
        check_item(utf8_len(canonical_json(result)) + 200, f"item {idx} of step {name!r}")
        base = record or StepRecord(execution_id, idx, name, StepStatus.RUNNING, started_at=attempt.started_at)
        done = replace(
            base, status=StepStatus.COMPLETED, attempts=(*base.attempts, attempt), error=None, label=label or base.label
        )
        self._items[(execution_id, step, idx)] = replace(
            done, result=copy.deepcopy(result), finished_at=attempt.finished_at
        )
        self._count(execution_id, step, ok=1, ends=int(chain_end))

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
        record = self._items.get((execution_id, step, idx))
        if failure_refused_by(record, attempt.attempt) is not None or (final and self._fenced(execution_id, step)):
            return False
        if record is not None and record.status is StepStatus.NOT_STARTED:
            return False
        base = record or StepRecord(execution_id, idx, name, StepStatus.RUNNING, started_at=attempt.started_at)
        self._items[(execution_id, step, idx)] = replace(
            base,
            status=StepStatus.FAILED if final else StepStatus.RETRYING,
            attempts=(*base.attempts, attempt),
            error=copy.deepcopy(attempt.error),
            finished_at=attempt.finished_at if final else base.finished_at,
            label=label or base.label,
        )
        if final:
            self._count(execution_id, step, failed=1, ends=int(chain_end))
        else:
            self.writes += 1
        return True

    def _fenced(self, execution_id: str, step: int) -> bool:
        """The table's transaction condition: the join exists and is not decided."""
        join = self._joins.get((execution_id, step))
        return join is None or join.decided is not None

    def decline_item(self, execution_id: str, step: int, name: str, idx: int, shards: int) -> bool:
        if (execution_id, step, idx) in self._items or self._fenced(execution_id, step):
            return False
        self._items[(execution_id, step, idx)] = StepRecord(execution_id, idx, name, StepStatus.NOT_STARTED)
        self._count(execution_id, step, declined=1)
        return True

    def _count(
        self, execution_id: str, step: int, *, ok: int = 0, failed: int = 0, ends: int = 0, declined: int = 0
    ) -> None:
        join = self._joins[(execution_id, step)]
        self._joins[(execution_id, step)] = replace(
            join, ok=join.ok + ok, failed=join.failed + failed, ends=join.ends + ends, declined=join.declined + declined
        )
        self.writes += 2

    def fan_items(self, execution_id: str, step: int, shards: int, start: int, count: int) -> list[StepRecord]:
        found = [self._items.get((execution_id, step, i)) for i in range(start, start + count)]
        return copy.deepcopy([r for r in found if r is not None])

    # signals
    def put_signal(self, signal: Signal) -> None:
        check_item(utf8_len(canonical_json(signal.payload)) + 200, f"signal {signal.name!r}")
        key = (signal.execution_id, signal.name, signal.key)
        if key in self._signals:
            raise ConflictError(f"signal {signal.key!r} exists")
        self._signals[key] = copy.deepcopy(signal)
        self.writes += 1

    def next_signal(self, execution_id: str, name: str) -> Signal | None:
        waiting = sorted(
            (k, s) for k, s in self._signals.items() if k[:2] == (execution_id, name) and s.consumed_by is None
        )
        return copy.deepcopy(waiting[0][1]) if waiting else None

    def signals(self, execution_id: str) -> list[Signal]:
        return copy.deepcopy([s for k, s in sorted(self._signals.items()) if k[0] == execution_id])

    def get_signal(self, execution_id: str, name: str, key: str) -> Signal | None:
        found = self._signals.get((execution_id, name, key))
        return None if found is None else copy.deepcopy(found)

    def consume_signal(self, execution_id: str, name: str, key: str, by: str) -> None:
        found = self._signals.get((execution_id, name, key))
        if found is None or found.consumed_by not in (None, by):
            raise ConflictError(f"signal {key!r} is consumed by another wait")
        self._signals[(execution_id, name, key)] = replace(found, consumed_by=by)
        self.writes += 1

    # callback handles
    def create_handle(self, handle: Handle) -> Handle:
        key = (handle.execution_id, handle.step)
        if key not in self._handles:
            self._handles[key] = handle
            self.writes += 1
        return copy.deepcopy(self._handles[key])

    def get_handle(self, execution_id: str, step: int) -> Handle | None:
        return copy.deepcopy(self._handles.get((execution_id, step)))

    def put_handle(self, handle: Handle, *, expected_version: int) -> None:
        current = self._handles.get((handle.execution_id, handle.step))
        if current is None or current.version != expected_version:
            raise ConflictError(f"conditional write on callback handle {handle.name!r} lost", current=current)
        self._handles[(handle.execution_id, handle.step)] = handle
        self.writes += 1

    # schedules
    def schedules(self) -> list[ScheduleCursor]:
        return [self._schedules[name] for name in sorted(self._schedules)]

    def put_schedule(self, cursor: ScheduleCursor, *, expected_version: int | None) -> None:
        current = self._schedules.get(cursor.workflow)
        if (current.version if current is not None else None) != expected_version:
            raise ConflictError(f"conditional write on the schedule of {cursor.workflow!r} lost", current=current)
        self._schedules[cursor.workflow] = cursor
        self.writes += 1

    def delete_schedule(self, workflow: str, *, expected_version: int) -> None:
        current = self._schedules.get(workflow)
        if current is None or current.version != expected_version:
            raise ConflictError(f"conditional delete of the schedule of {workflow!r} lost", current=current)
        del self._schedules[workflow]
        self.writes += 1

    # retention (engine/retention.py): one expiry per execution stands for its items' stamps
    def retain(self, execution_id: str, expires_at: float | None, limit: int) -> Stamped:
        kept = self._stamps.get(execution_id)
        if kept == expires_at:
            return Stamped(0, finished=True)
        items = self._items_of(execution_id)
        if expires_at is None:
            self._stamps.pop(execution_id, None)
        else:
            self._stamps[execution_id] = expires_at
        self.writes += len(items)
        return Stamped(len(items), finished=True)

    def _items_of(self, execution_id: str) -> list[tuple[Any, ...]]:
        keys: list[tuple[Any, ...]] = [k for k in self._steps if k[0] == execution_id]
        keys += [k for k in self._signals if k[0] == execution_id]
        keys += [k for k in self._joins if k[0] == execution_id]
        keys += [k for k in self._items if k[0] == execution_id]
        keys += [k for k in self._handles if k[0] == execution_id]
        return keys

    def reap(self, now: float) -> int:
        """Delete what DynamoDB's TTL would have by ``now``: expired executions, and the items of
        executions whose stamps expired (a stamp outlives nothing: both are the same time)."""
        gone = [eid for eid, ex in self._executions.items() if ex.expired(now)]
        gone += [eid for eid, at in self._stamps.items() if at <= now and eid not in gone]
        for eid in gone:
            self._executions.pop(eid, None)
            self._stamps.pop(eid, None)
            tables: list[dict[Any, Any]] = [self._steps, self._signals, self._joins, self._items, self._handles]
            for table in tables:
                for key in [k for k in table if k[0] == eid]:
                    del table[key]
        return len(gone)

    # queries
    def note_parked(self, count: int, now: float) -> float:
        if self._parked_mark is None or self._parked_mark[0] != count:
            self._parked_mark = (count, now)
            self.writes += 1
        return self._parked_mark[1]

    def due(self, shard: int, now: float, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        ordered = sorted(
            (ex.next_wake_at, ex.id)
            for ex in self._executions.values()
            if ex.next_wake_at is not None and ex.next_wake_at <= now and shard_of(ex.id, self._shards) == shard
        )
        start = _offset(cursor)
        page = [eid for _, eid in ordered[start : start + limit]]
        more = start + limit < len(ordered)
        return page, (str(start + limit) if more else None)

    def next_wake(self, *, skip_waits: bool = True) -> float | None:
        """The earliest wake time of any execution (what the sweeper will find next);
        without ``skip_waits``, the timeouts of WAITING executions and the rechecks of BLOCKED
        ones (which wait for a deploy) do not count."""
        times = [
            ex.next_wake_at
            for ex in self._executions.values()
            if ex.next_wake_at is not None
            and (skip_waits or ex.status not in (Status.WAITING, Status.BLOCKED))
            and not (ex.terminal and ex.parent is None)  # its retention stamp: nothing runs
        ]
        return min(times) if times else None

    def list_executions(self, *, status: str | None, workflow: str | None, limit: int, cursor: str | None) -> Page:
        newest = sorted(self._executions.values(), key=lambda ex: (ex.created_at, ex.id), reverse=True)
        chosen = [
            ex
            for ex in newest
            if (status is None or ex.status.value == status) and (workflow is None or ex.workflow == workflow)
        ]
        start = _offset(cursor)
        page = chosen[start : start + limit]
        more = start + limit < len(chosen)
        return Page(copy.deepcopy(page), str(start + limit) if more else None)


def _offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit():
        raise InvalidInput("cursor is not one this store returned")
    return int(cursor)
