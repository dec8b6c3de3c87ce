"""The control plane's JSON shapes of executions, steps and DLQ messages.

Every timestamp ``x_at`` is an ISO-8601 UTC string (millisecond precision) and comes
with ``x_at_epoch``, the same instant in seconds since the epoch: humans read the
first, scripts compute with the second.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engine import compensation, progress
from engine.control import OpenCount
from engine.dead_letters import DeadLetter, RedriveResult
from engine.definitions import Missing
from engine.fan_view import FanPage, OpenStep
from engine.state import Attempt, Execution, StepRecord


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _times(**stamps: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in stamps.items():
        out[name] = iso(value)
        out[f"{name}_epoch"] = value
    return out


def execution_summary(ex: Execution, missing: Missing | None = None) -> dict[str, Any]:
    """A list's row of ``ex``. Its ``unregistered`` is the one its page has (null, or why this
    deployment cannot run it), so a list marks those executions as their pages do."""
    return {
        "id": ex.id,
        "workflow": ex.workflow,
        "status": ex.status.value,
        "current_step": ex.current_step,
        "attempt": ex.attempt,
        "version": ex.version,
        "workflow_version": ex.workflow_version,
        "fingerprint": ex.fingerprint,
        "blocked": None if ex.blocked is None else {**ex.blocked, **_times(since=ex.blocked.get("since"))},
        "error": ex.error,
        # An ended execution's wake is the engine's own (the retention stamp), not the workflow's.
        **_times(
            next_wake_at=None if ex.terminal else ex.next_wake_at,
            created_at=ex.created_at,
            updated_at=ex.updated_at,
            expires_at=ex.expires_at,  # when retention ends and it is gone (engine/retention.py)
        ),
        "unregistered": unregistered(ex, missing),
    }


def execution(ex: Execution, step_names: list[str] | None = None, missing: Missing | None = None) -> dict[str, Any]:
    out = execution_summary(ex, missing)
    if step_names is not None:
        out["current_step_name"] = step_names[ex.current_step] if ex.current_step < len(step_names) else None
    out["input"] = ex.input
    out["output"] = ex.context
    out["wait"] = wait(ex)
    out["parent"] = ex.parent
    return out


def unregistered(ex: Execution, missing: Missing | None) -> dict[str, Any] | None:
    """Why this deployment cannot run the rest of ``ex`` (engine/definitions.py: its workflow is
    not registered, or not in its shape); null when it can, or once it has ended (nothing is left)."""
    if missing is None or ex.terminal:
        return None
    return {
        "code": missing.code.value,
        "workflow": missing.workflow,
        "workflow_version": missing.version,
        "registered_versions": list(missing.registered),
        "message": missing.message,
    }


def wait(ex: Execution) -> dict[str, Any] | None:
    """What the execution waits for; the callback token's hash is never shown."""
    w = ex.wait
    if w is None:
        return None
    return {
        "kind": w.kind.value,
        "name": w.name,
        "step": w.step,
        "attempt": w.attempt,
        "child_id": w.child_id,
        "polls": w.polls,
        **_times(deadline=w.deadline, heartbeat_deadline=w.heartbeat_deadline),
    }


def _duration(started: float | None, finished: float | None) -> float | None:
    if started is None or finished is None:
        return None  # still running
    return round(max(0.0, finished - started), 3)


def attempt(a: Attempt) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "outcome": a.outcome,
        "error": a.error,
        "retry_delay": a.retry_delay,
        "duration_seconds": _duration(a.started_at, a.finished_at),
        **_times(started_at=a.started_at, finished_at=a.finished_at),
    }


def step(record: StepRecord, kinds: list[str] | None = None) -> dict[str, Any]:
    """``kinds``: each step's kind in the workflow (progress.step_kinds); ``step`` when unknown."""
    undo = compensation.is_compensation(record)
    kinds = kinds or []
    return {
        "index": record.index,
        "name": record.name,
        "kind": kinds[record.index] if 0 <= record.index < len(kinds) else "step",
        # Forward records come first, then the compensations in the order they ran.
        "phase": "compensation" if undo else ("catch" if record.name.endswith("#catch") else "forward"),
        "status": record.status.value,
        "attempts": [attempt(a) for a in record.attempts],
        "result": record.result,
        "error": record.error,
        "duration_seconds": _duration(record.started_at, record.finished_at),
        **_times(started_at=record.started_at, finished_at=record.finished_at),
    }


def fan_item(record: StepRecord | None, index: int, unstarted: str, name: str | None = None) -> dict[str, Any]:
    """One item of a fan-out step; an item with no record yet is ``unstarted`` with no attempts.
    ``name``: a parallel's branch name; a map item's is its record's (its ``item_namer``'s)."""
    label = name if name is not None else (record.label if record is not None else None)
    named = {} if label is None else {"name": label}
    if record is None:
        return {"index": index, **named, "status": unstarted, "attempts": [], "duration_seconds": None}
    return {
        "index": index,
        **named,
        "status": record.status.value,
        "attempts": [attempt(a) for a in record.attempts],
        "result": record.result,
        "error": record.error,
        "duration_seconds": _duration(record.started_at, record.finished_at),
        **_times(started_at=record.started_at, finished_at=record.finished_at),
    }


def open_step(found: OpenStep) -> dict[str, Any]:
    """A fan-out step's row before (or without) its own record: the shape of ``step``."""
    return {
        "index": found.index,
        "name": found.name,
        "kind": found.kind,
        "phase": "forward",
        "status": found.status,
        "attempts": [],
        "result": None,
        "error": found.error,
        "duration_seconds": _duration(found.started_at, found.finished_at),
        **_times(started_at=found.started_at, finished_at=found.finished_at),
    }


def fan_page(found: FanPage, names: list[str] | None = None) -> dict[str, Any]:
    """A page of a fan-out step's items, its next page's ``items_from`` and the join's counts;
    ``names``: a parallel's branch names, by item index."""
    join, names = found.join, names or []

    def name(idx: int) -> str | None:
        return names[idx] if idx < len(names) else None

    return {
        "items": [
            fan_item(r, found.start + i, found.unstarted.value, name(found.start + i))
            for i, r in enumerate(found.records)
        ],
        "items_next": found.next,
        "n": join.n,
        "ok": join.ok,
        "failed": join.failed,
        "decided": join.decided,
    }


def state(found: progress.State) -> dict[str, Any]:
    return {"kind": found.kind.value, "reason": found.reason, "step": found.step, **_times(until=found.until)}


def workflow(
    described: dict[str, Any], next_fires: dict[str, float | None], versions: list[OpenCount] | None = None
) -> dict[str, Any]:
    """A workflow's (newest version's) description; a scheduled one's ``schedule`` gains
    ``next_fire`` (and ``next_fire_epoch``): its cursor's next fire time, null when the expression
    has none left. ``versions``: each registered version with its executions not yet ended."""
    out = dict(described)
    if versions is not None:
        out["versions"] = [
            {
                "version": v.version,
                "fingerprint": v.fingerprint,
                "registered": v.registered,
                "open": v.open,
                "exact": v.exact,
            }
            for v in versions
        ]
    schedule = described.get("schedule")
    if not schedule:
        return out
    return {**out, "schedule": {**schedule, **_times(next_fire=next_fires.get(described["name"]))}}


def read_at(now: float) -> dict[str, Any]:
    """The control plane's clock when it answered: relative times (``in 59m``) count from it,
    which differs from the reader's clock under ``loom time advance``."""
    return _times(read_at=now)


def pending(steps: list[progress.Pending]) -> list[dict[str, Any]]:
    return [{"index": p.index, "name": p.name, "kind": p.kind} for p in steps]


def event(entry: progress.Event) -> dict[str, Any]:
    return {"kind": entry.kind, **_times(at=entry.at), **entry.detail}


def dead_letter(letter: DeadLetter) -> dict[str, Any]:
    return {
        "message_id": letter.message_id,
        "kind": letter.kind,
        "execution_id": letter.execution_id,
        "receive_count": letter.receive_count,
        "body": letter.body,
        **_times(sent_at=letter.sent_at),
    }


def redrive_result(result: RedriveResult) -> dict[str, Any]:
    return result.to_dict()
