"""A fan-out step's items for a reader (the history's nested rows): one page, in index order.

Read only, through the store port: the join record's counters and the item records of
one index range. An item with no record yet has not been started (the window has not
reached it, or the join was decided before it was); it is told as such, so a page
always covers its whole index range and a reader can draw every row of a map.

A fan-out step writes its own history record only when it joins with success: while it
runs, and when it failed or was cancelled, its items are its only trace. ``open_step``
tells the row a reader draws for it then (its status from the join and the execution).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine import compensation
from engine.errors import InvalidInput
from engine.join import JoinRecord, JoinVerdict
from engine.parts import Parts
from engine.state import Execution, Status, StepRecord
from engine.workflow import WorkflowSpec

FAN_KINDS = frozenset({"parallel", "map"})

PAGE = 50  # items in the history's first page of a fan-out step
MAX_PAGE = 500


class Unstarted(StrEnum):
    PENDING = "PENDING"  # the join is not decided: the window will reach it
    NOT_STARTED = "NOT_STARTED"  # the join was decided first (min_successful, tolerated failures)


@dataclass(frozen=True)
class FanPage:
    join: JoinRecord
    start: int
    records: tuple[StepRecord | None, ...]  # one per index start .. start+len-1; None: no record
    next: int | None  # the next page's ``items_from``; None on the last page

    @property
    def unstarted(self) -> Unstarted:
        return Unstarted.NOT_STARTED if self.join.decided else Unstarted.PENDING


def page_bounds(n: int, start: int, count: int) -> tuple[int, int | None]:
    """How many items this page holds and where the next one starts (None: the last page)."""
    if start < 0 or count < 1:
        raise InvalidInput("items_from must be >= 0 and the page size >= 1")
    size = max(0, min(count, n - start))
    nxt = start + size
    return size, nxt if nxt < n else None


def page(parts: Parts, execution_id: str, step: int, start: int = 0, count: int = PAGE) -> FanPage | None:
    """Items ``start .. start+count-1`` of fan-out step ``step``; None when that step never fanned out."""
    join = parts.store.get_join(execution_id, step)
    if join is None:
        return None
    size, nxt = page_bounds(join.n, start, count)
    found = {r.index: r for r in parts.store.fan_items(execution_id, step, join.shards, start, size)} if size else {}
    return FanPage(join, start, tuple(found.get(i) for i in range(start, start + size)), nxt)


def checked_page(parts: Parts, ex: Execution, step: int, start: int, count: int) -> FanPage:
    """As ``page``, for a reader that named the step: ``InvalidInput`` for a step that is not
    a started fan-out of this execution."""
    found = page(parts, ex.id, step, start, count)
    if found is None:
        raise InvalidInput(f"step {step} of execution {ex.id} is not a fan-out step that has started")
    return found


@dataclass(frozen=True)
class OpenStep:
    """The row of a fan-out step with no history record of its own (see the module's doc)."""

    index: int
    name: str
    kind: str
    status: str  # RUNNING, FAILED or CANCELLED
    started_at: float | None
    finished_at: float | None
    error: dict[str, Any] | None


def unrecorded(ex: Execution, records: list[StepRecord], spec: WorkflowSpec | None) -> tuple[int, str, str] | None:
    """(index, name, kind) of the fan-out step the execution is at with no forward record, if any."""
    if spec is None or not 0 <= ex.current_step < len(spec.steps) or ex.status is Status.COMPENSATING:
        return None
    described = spec.describe()["steps"][ex.current_step]
    kind = str(described.get("kind", "step"))
    if kind not in FAN_KINDS:
        return None
    if any(r.index == ex.current_step and not compensation.is_compensation(r) for r in records):
        return None
    return ex.current_step, str(described["name"]), kind


def open_status(ex: Execution, join: JoinRecord) -> str:
    if join.decided == JoinVerdict.FAIL.value or (ex.terminal and ex.status is not Status.CANCELLED):
        return "FAILED"
    return "CANCELLED" if ex.status is Status.CANCELLED else "RUNNING"


def open_step(parts: Parts, ex: Execution, records: list[StepRecord], spec: WorkflowSpec | None) -> OpenStep | None:
    """The row for a fan-out step that has opened (its join exists) and has no record yet."""
    found = unrecorded(ex, records, spec)
    if found is None:
        return None
    join = parts.store.get_join(ex.id, found[0])
    if join is None:
        return None  # not opened: it is simply pending
    status = open_status(ex, join)
    ended = status != "RUNNING"
    error = ex.error if ended and isinstance(ex.error, dict) else None
    return OpenStep(*found, status, ex.attempt_started_at, ex.updated_at if ended else None, error)
