"""Where an execution stands, read from its item, its history and its workflow: pure.

The control plane's ``state``, ``pending`` and ``events`` fields (functions/views.py) and
so the CLI's history and the console's timeline come from here, so that every reader
says the same thing about a sleeping, waiting or retrying execution. Nothing is read
beyond what the caller already has; ``spec`` may be None (a workflow this deployment
does not have), and then only what the item says is told.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from engine import compensation
from engine.error_report import one_line
from engine.state import Execution, Status, StepRecord, WaitKind
from engine.workflow import WorkflowSpec


class StateKind(StrEnum):
    RUNNING = "running"
    RETRYING = "retrying"
    SLEEPING = "sleeping"
    WAITING = "waiting"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class State:
    kind: StateKind
    reason: str  # one readable line
    until: float | None = None  # the wake time: sleep end, retry time, wait deadline
    # The step it is at (None once terminal): a reader marks that row, and only while the
    # row's record is not newer than this state (the two are read one after the other).
    step: int | None = None


@dataclass(frozen=True)
class Pending:
    index: int
    name: str
    kind: str


@dataclass(frozen=True)
class Event:
    """An execution-level entry of the history (not a step): started, cancelled, the end."""

    kind: str
    at: float
    detail: dict[str, Any]


def stamp(epoch: float) -> str:
    """A compact UTC time for a reason line: the date matters for a sleep of days."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def step_kinds(spec: WorkflowSpec | None) -> list[str]:
    """Each step's kind as the workflow describes it (step, sleep, callback, ..., map)."""
    if spec is None:
        return []
    return [str(s.get("kind", "step")) for s in spec.describe()["steps"]]


def _step_name(ex: Execution, spec: WorkflowSpec | None, index: int) -> str:
    if spec is not None and 0 <= index < len(spec.steps):
        return spec.steps[index].name
    return f"#{index}"


def state(ex: Execution, spec: WorkflowSpec | None, now: float) -> State:
    """What the execution is doing now, in one line, until when, and at which step."""
    return replace(_state(ex, spec, now), step=None if ex.terminal else ex.current_step)


def _state(ex: Execution, spec: WorkflowSpec | None, now: float) -> State:
    if ex.terminal:
        return _terminal(ex, spec)
    if ex.status is Status.BLOCKED:
        return State(StateKind.BLOCKED, _blocked(ex))  # its next_wake_at is a recheck, not an end
    name = _step_name(ex, spec, ex.current_step)
    if ex.status is Status.SLEEPING:
        until = ex.next_wake_at
        return State(StateKind.SLEEPING, f"sleeping until {stamp(until)}" if until else "sleeping", until)
    if ex.status is Status.COMPENSATING:
        return State(StateKind.COMPENSATING, f"compensating step {name} (attempt {ex.round_attempt})")
    if ex.status is Status.WAITING and ex.wait is not None:
        return _waiting(ex, name)
    w = ex.wait
    if w is not None and w.kind is WaitKind.POLL and w.attempt == ex.attempt and ex.ready_at and ex.ready_at > now:
        # A poll waits between checks as RUNNING: for a reader it is waiting.
        return State(StateKind.WAITING, f"polling {name}: next check at {stamp(ex.ready_at)}", ex.ready_at)
    if ex.ready_at is not None and ex.ready_at > now:
        reason = f"retrying step {name} (attempt {ex.round_attempt}) at {stamp(ex.ready_at)}"
        return State(StateKind.RETRYING, reason, ex.ready_at)
    doing = f"catch handler of step {name}" if ex.catching is not None else f"step {name}"
    return State(StateKind.RUNNING, f"running {doing} (attempt {ex.round_attempt})")


def _blocked(ex: Execution) -> str:
    """``spec`` is None for a BLOCKED execution (no registered version has its shape, or none
    of its workflow at all): name only the index."""
    if (ex.blocked or {}).get("reason") == "workflow_not_registered":
        return (
            f"blocked on step {ex.current_step}: workflow_not_registered, this deployment has no version of "
            f"{ex.workflow!r} (register it again and it resumes)"
        )
    return (
        f"blocked on step {ex.current_step}: definition_changed, its workflow has another shape "
        f"now (deploy version {ex.workflow_version} again, or loom migrate)"
    )


def _waiting(ex: Execution, name: str) -> State:
    w = ex.wait
    assert w is not None  # the caller checked
    until = w.wake_at()
    what = f"child {w.child_id}" if w.kind is WaitKind.CHILD else f"{w.kind.value} {w.name or name}"
    reason = f"waiting for {what}" + (f" (timeout {stamp(until)})" if until is not None else "")
    return State(StateKind.WAITING, reason, until)


def _terminal(ex: Execution, spec: WorkflowSpec | None) -> State:
    kind = StateKind(ex.status.value.lower())
    if kind is StateKind.COMPLETED:
        return State(kind, "completed")
    where = _step_name(ex, spec, ex.current_step)
    cause = one_line(ex.error) if isinstance(ex.error, dict) else ""
    if kind is StateKind.CANCELLED:
        return State(kind, f"cancelled at step {where}")
    if kind is StateKind.FAILED:
        return State(kind, f"failed at step {where}: {cause}" if cause else f"failed at step {where}")
    # COMPENSATED / COMPENSATION_FAILED: ``error`` is what started the undo.
    words = kind.value.replace("_", " ")
    return State(kind, f"{words} after: {cause}" if cause else words)


def pending(ex: Execution, records: list[StepRecord], spec: WorkflowSpec | None) -> list[Pending]:
    """The workflow's forward steps with no history record yet, in order; none once the
    execution ended or is compensating (the forward steps left will never run)."""
    if spec is None or ex.terminal or ex.status is Status.COMPENSATING:
        return []
    recorded = {r.index for r in records if not compensation.is_compensation(r)}
    kinds = step_kinds(spec)
    return [
        Pending(i, s.name, kinds[i]) for i, s in enumerate(spec.steps) if i >= ex.current_step and i not in recorded
    ]


def events(ex: Execution, records: list[StepRecord]) -> list[Event]:
    """Execution-level entries in time order: started, cancelled (when it was), the end."""
    out = [Event("started", ex.created_at, {})]
    cancel = _cancel(ex, records)
    if cancel is not None:
        out.append(cancel)
    if ex.terminal and ex.status is not Status.CANCELLED:
        detail: dict[str, Any] = {}
        if isinstance(ex.error, dict) and ex.status is not Status.COMPLETED:
            detail["error"] = one_line(ex.error)
        out.append(Event(ex.status.value.lower(), ex.updated_at, detail))
    return sorted(out, key=lambda e: e.at)


def _cancel(ex: Execution, records: list[StepRecord]) -> Event | None:
    if ex.status is Status.CANCELLED:
        return Event("cancelled", ex.updated_at, {"compensate": False})
    cause = ex.error if isinstance(ex.error, dict) else {}
    if cause.get("reason") != "cancelled":
        return None
    # A cancel with compensate records its time in the cause; older items did not, and
    # then the first compensation's start is the nearest thing the history knows.
    at = cause.get("at")
    if not isinstance(at, (int, float)):
        starts = [r.started_at for r in records if compensation.is_compensation(r) and r.started_at is not None]
        at = min(starts) if starts else ex.updated_at
    return Event("cancelled", float(at), {"compensate": True})
