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
from engine.limits import check_item, utf8_len
from engine.ports import Page
from engine.state import Attempt, Execution, StepRecord, StepStatus, canonical_json


class InMemoryStore:
    """Implements ``engine.ports.Store`` in a dict. Not thread-safe: tests drive it from one thread."""

    def __init__(self, shards: int = 4) -> None:
        self._shards = shards
        self._executions: dict[str, Execution] = {}
        self._steps: dict[tuple[str, int, str], StepRecord] = {}
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

    # queries
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

    def next_wake(self) -> float | None:
        """The earliest wake time of any execution (what the sweeper will find next)."""
        times = [ex.next_wake_at for ex in self._executions.values() if ex.next_wake_at is not None]
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
