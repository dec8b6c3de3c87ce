"""The control API: start, inspect, list, cancel and re-drive executions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine import compensation, retention
from engine import transitions as tr
from engine.errors import (
    InvalidInput,
    NotBlocked,
    NotFailed,
    ParentDecides,
)
from engine.lifecycle import cancel as cancel
from engine.lifecycle import get as get
from engine.lifecycle import parent_of, still_waited_on
from engine.lifecycle import start as start
from engine.messages import StepMessage
from engine.outbox import dispatch, execution_log
from engine.parts import Parts
from engine.ports import Page
from engine.state import Execution, Status, StepRecord
from engine.workflow import WorkflowSpec

CONFLICT_RETRIES = 5
# ``open_by_version`` counts among at most this many of a workflow's newest executions.
OPEN_COUNT_LIMIT = 5000
# ... and in at most this many listing pages (a rare workflow in a large table reads few per page).
OPEN_COUNT_PAGES = 25


@dataclass(frozen=True)
class OpenCount:
    """A version of a workflow and how many of its executions have not ended (``loom workflows``).

    ``version`` None: executions started before versions were recorded (they run on the newest).
    ``registered`` False: a version still has open executions but this deployment lacks it
    (they are BLOCKED). ``exact`` False: the workflow has more than ``OPEN_COUNT_LIMIT`` executions."""

    version: int | None
    fingerprint: str | None
    registered: bool
    open: int
    exact: bool = True


def history(parts: Parts, execution_id: str) -> list[StepRecord]:
    return timeline(parts, execution_id)[1]


def timeline(parts: Parts, execution_id: str) -> tuple[Execution, list[StepRecord]]:
    """The execution and its history, read in that order: a step committed in between is
    then in the history beyond ``current_step``, never missing from both (engine/progress.py)."""
    ex = get(parts, execution_id)
    return ex, compensation.ordered_history(parts.store.history(execution_id))


def list_executions(
    parts: Parts, *, status: str | None = None, workflow: str | None = None, limit: int = 50, cursor: str | None = None
) -> Page:
    """Raises ``InvalidInput`` for an unknown status, a limit outside 1..1000 or a bad cursor."""
    if status is not None and status not in Status.__members__:
        raise InvalidInput(f"status must be one of {sorted(Status.__members__)}")
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000")
    page = parts.store.list_executions(status=status, workflow=workflow, limit=limit, cursor=cursor)
    now = parts.clock.now()
    # Past retention is gone for readers before TTL deletes it (engine/retention.py).
    return Page([ex for ex in page.items if not ex.expired(now)], page.cursor)


def redrive_failed(parts: Parts, execution_id: str) -> Execution:
    """Give a FAILED execution a new round of attempts at the step that failed.

    The message is a guarded ``redrive``: the step's history may say COMPLETED (the
    execution failed after the commit, e.g. on a worker without the workflow), and then
    the execution rolls forward with that result instead of running the step again.

    Raises ``NotFailed`` unless the execution is FAILED, ``UnknownWorkflow`` if this
    deployment does not have its workflow (it would only fail again), ``ParentDecides``
    for a child whose parent no longer waits on it (nothing is written).
    """
    ex = get(parts, execution_id)
    if ex.status is not Status.FAILED:
        raise NotFailed(f"execution {execution_id!r} is {ex.status.value}, not FAILED", status=ex.status.value)
    parts.registry.of(ex)
    if ex.parent is not None:
        _check_parent_waits(parts, ex)
    new = tr.redriven_state(ex, parts.clock.now(), parts.config)
    parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    if ex.expires_at is not None:
        retention.unstamp(parts, new)  # before it runs: no record of a running execution expires
    execution_log(new).info("execution.redriven")
    message = StepMessage.redrive_of(new)
    dispatch(parts, tr.Effects(run_next=message))
    return new


def _check_parent_waits(parts: Parts, kid: Execution) -> None:
    """A FAILED child may be revived only while its parent still waits on it (its end notice
    not yet taken). Once the parent has taken it, the parent's attempt failed: it retries with
    a fresh child or failed itself, and a revived child would run its work for nobody."""
    parent = parent_of(parts, kid)
    if still_waited_on(parts, parent, kid):
        return
    parent_id = str(kid.parent.get("id", "")) if kid.parent else ""
    state = "gone" if parent is None else f"{parent.status.value} at step {parent.current_step}"
    raise ParentDecides(
        f"execution {kid.id!r} is a child of {parent_id!r} ({state}), which no longer waits on it: "
        f"re-drive {parent_id!r} instead (its new attempt starts a fresh child)",
        parent=parent_id,
    )


def migrate(
    parts: Parts,
    execution_id: str,
    mapping: Mapping[str, str],
    version: int | None = None,
    *,
    at: str | None = None,
) -> Execution:
    """Move a BLOCKED execution onto a registered definition on purpose (``loom migrate``).

    ``mapping`` takes old step names to new ones; the step the execution stopped at must be in
    it, or have a step of the same name in the target. The target is ``version`` (default: the
    newest). The name of the step it stopped at comes from its history (a step with attempts
    recorded) or from ``at`` (the definition it started on is no longer registered, or it would
    not be blocked). It resumes there as RUNNING with a new round of attempts, by a guarded redrive.
    Only a BLOCKED execution that stopped at a step (not a sleep, wait or compensation) moves:
    anything else is still on a definition that runs it. Raises ``NotBlocked``, ``InvalidInput``
    (an unmapped or unknown step), ``UnknownWorkflow``; nothing is written then.
    """
    ex = get(parts, execution_id)
    before = (ex.blocked or {}).get("from")
    if ex.status is not Status.BLOCKED or before != Status.RUNNING.value:
        what = ex.status.value if ex.status is not Status.BLOCKED else f"BLOCKED from {before}"
        raise NotBlocked(f"execution {execution_id!r} is {what}: only one blocked at a step migrates", status=what)
    target = _target(parts, ex, version)
    old_name = _current_name(parts, ex, at)
    new_name = mapping.get(old_name, old_name)
    names = [s.name for s in target.steps]
    if new_name not in names:
        raise InvalidInput(
            f"step {old_name!r} (where {execution_id!r} stopped) maps to {new_name!r}, which version "
            f"{target.version} does not have; its steps: {names}"
        )
    now = parts.clock.now()
    new = tr.migrated_state(ex, now, parts.config, names.index(new_name), target.fingerprint, target.version)
    parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    execution_log(new).warning(
        "execution.migrated",
        from_step=ex.current_step,
        from_name=old_name,
        to_step=new.current_step,
        to_name=new_name,
        from_version=ex.workflow_version,
        to_version=target.version,
    )
    dispatch(parts, tr.Effects(run_next=StepMessage.redrive_of(new)))
    return new


def _target(parts: Parts, ex: Execution, version: int | None) -> WorkflowSpec:
    specs = parts.registry.versions(ex.workflow)
    if version is None:
        return specs[-1]
    found = [s for s in specs if s.version == version]
    if not found:
        raise InvalidInput(
            f"workflow {ex.workflow!r} has no version {version}; registered: {[s.version for s in specs]}"
        )
    return found[0]


def _current_name(parts: Parts, ex: Execution, at: str | None) -> str:
    """The name of the step ``ex`` stopped at: its history's record at that index (attempts were
    recorded there), else ``at``; both given must agree. InvalidInput when neither is known."""
    mine = [r.name for r in parts.store.history(ex.id) if r.index == ex.current_step]
    if mine and at is not None and at not in mine:
        raise InvalidInput(f"execution {ex.id!r} stopped at step {mine[0]!r}, not {at!r}")
    if mine:
        return mine[0]
    if at is None:
        raise InvalidInput(
            f"execution {ex.id!r} stopped before running step {ex.current_step} of its old definition, "
            "whose name Loom cannot read back: name it with at (loom migrate --at NAME)"
        )
    return at


def open_by_version(parts: Parts, workflow: str) -> list[OpenCount]:
    """Each registered version of ``workflow`` (and any other that still has executions) with
    its count of executions not yet ended: version 1 can be removed once its count is 0.

    Counted over the newest ``OPEN_COUNT_LIMIT`` executions of the listing, read in at most
    ``OPEN_COUNT_PAGES`` pages (``exact`` False when there were more): an execution older than
    that still open is not counted."""
    counts: dict[tuple[int | None, str | None], int] = {}
    cursor: str | None = None
    read = 0
    for _ in range(OPEN_COUNT_PAGES):
        page = parts.store.list_executions(status=None, workflow=workflow, limit=1000, cursor=cursor)
        for ex in page.items:
            if not ex.terminal:
                key = (ex.workflow_version, ex.fingerprint)
                counts[key] = counts.get(key, 0) + 1
        read += len(page.items)
        cursor = page.cursor
        if cursor is None or read >= OPEN_COUNT_LIMIT:
            break
    exact = cursor is None
    out = [
        OpenCount(s.version, s.fingerprint, True, counts.pop((s.version, s.fingerprint), 0), exact)
        for s in parts.registry.versions(workflow)
    ]
    out += [OpenCount(v, f, False, n, exact) for (v, f), n in sorted(counts.items(), key=lambda kv: str(kv[0]))]
    return out
