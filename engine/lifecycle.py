"""An execution's life as the control plane and the primitives share it: start, cancel, and
a cancel's cascade to the children it started (a child step's, a fan-out item's).

A child (engine/children.py, engine/fan_children.py) is started and cancelled through this
module, as the API's executions are (engine/control.py): one way in, one way out.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from engine import transitions as tr
from engine.errors import (
    AlreadyTerminal,
    CompensationNotDeployed,
    ConflictError,
    ExecutionAlreadyExists,
    ExecutionNotFound,
    InvalidInput,
    LoomError,
)
from engine.fanout_spec import FanoutSpec
from engine.history_rules import last_attempt
from engine.join import to_resend
from engine.limits import check_execution_id, check_item, meta_item_size
from engine.outbox import dispatch, execution_log, notify_parent
from engine.parts import Parts
from engine.serde import is_typed
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, StepStatus, WaitKind, canonical_json
from engine.workflow import ChildSpec, StepSpec, WorkflowSpec

CONFLICT_RETRIES = 5
MAX_EXECUTION_ID = 128


def start(
    parts: Parts,
    workflow: str,
    input: Any,
    execution_id: str | None = None,
    *,
    parent: dict[str, Any] | None = None,
) -> tuple[Execution, bool]:
    """Start an execution; idempotent on ``execution_id``. Returns (execution, created).

    ``parent`` ({id, step, attempt}) makes it a child (engine/children.py).

    Raises ``UnknownWorkflow``, ``InvalidInput`` (and its ``PayloadTooLarge``),
    ``ExecutionAlreadyExists`` when the id is taken with another workflow or input.
    """
    spec = parts.registry.get(workflow)
    if execution_id is None:
        execution_id = uuid.uuid4().hex
    check_execution_id(execution_id)
    input_json = _input_json(input, spec)
    _check_input_type(spec, json.loads(input_json))
    check_item(meta_item_size(input_json, input_json), "the input")
    now = parts.clock.now()
    document = json.loads(input_json)
    draft = Execution(
        id=execution_id,
        workflow=workflow,
        status=Status.RUNNING,
        current_step=0,
        version=1,
        input=document,
        context=dict(document),
        created_at=now,
        updated_at=now,
        parent=parent,
    )
    ex, effects = tr.start_state(draft, spec, parts.config)
    try:
        parts.store.create_execution(ex)
    except ConflictError as exc:
        # The conflict carries the item that is there (a lost answer of our own create is not a conflict).
        existing = exc.current if isinstance(exc.current, Execution) else parts.store.get_execution(execution_id)
        if existing is None:  # deleted in between; let the caller retry
            raise
        if existing.workflow != workflow or canonical_json(existing.input) != input_json:
            raise ExecutionAlreadyExists(
                f"execution {execution_id!r} exists with a different workflow or input",
                execution_id=execution_id,
            ) from exc
        return existing, False
    execution_log(ex).info("execution.started", workflow=workflow)
    dispatch(parts, effects)
    return ex, True


def _input_json(input: Any, spec: WorkflowSpec) -> str:
    if input is None:
        input = {}
    if not isinstance(input, dict) and not is_typed(input):
        raise InvalidInput("input must be a JSON object")
    try:
        if is_typed(input):  # a dataclass or a model given to start: stored as the JSON it dumps to
            input = spec.serializer.dump(input)
            if not isinstance(input, dict):
                raise InvalidInput(f"input must dump to a JSON object, not {type(input).__name__}")
        return canonical_json(input)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"input is not JSON-serialisable: {exc}") from exc


def _check_input_type(spec: WorkflowSpec, document: dict[str, Any]) -> None:
    """A workflow with ``input_type`` refuses, before any write, an input that does not load into it."""
    if spec.input_type is None:
        return
    try:
        spec.serializer.load(document, spec.input_type)
    except (TypeError, ValueError) as exc:
        name = getattr(spec.input_type, "__name__", repr(spec.input_type))
        raise InvalidInput(f"workflow {spec.name!r}: the input does not load into {name}: {exc}") from None


def get(parts: Parts, execution_id: str) -> Execution:
    """Raises ``InvalidExecutionId`` or ``ExecutionNotFound`` (also for one past its retention,
    which DynamoDB's TTL deletes only some time later: engine/retention.py)."""
    check_execution_id(execution_id)
    ex = parts.store.get_execution(execution_id)
    if ex is None:
        raise ExecutionNotFound(f"no execution {execution_id!r}", execution_id=execution_id)
    if ex.expired(parts.clock.now()):
        raise ExecutionNotFound(
            f"no execution {execution_id!r}: it ended and its retention has passed", execution_id=execution_id
        )
    return ex


def cancel(parts: Parts, execution_id: str, *, compensate: bool = False) -> Execution:
    """Raises ``AlreadyTerminal``, or ``ConflictError`` if the execution kept changing.

    ``compensate``: a saga's committed steps are undone first (COMPENSATING, see
    engine/compensation.py); a workflow with nothing to undo is simply cancelled.
    """
    ex = get(parts, execution_id)
    for _ in range(CONFLICT_RETRIES):
        if ex.terminal or (compensate and ex.status is Status.COMPENSATING):
            if ex.status is Status.CANCELLED:
                # A repeated cancel finishes a cascade that a crash cut short (engine/children.py).
                cancel_running_children(parts, ex)
            raise AlreadyTerminal(f"execution {execution_id!r} is already {ex.status.value}", status=ex.status.value)
        if ex.status is Status.COMPENSATING:
            # Stopping an undo half way would leave the saga inconsistent: let it finish.
            raise AlreadyTerminal(f"execution {execution_id!r} is compensating", status=ex.status.value)
        first = first_to_undo(parts, ex) if compensate else None
        if first is not None:
            cause: dict[str, Any] = {"type": "Cancelled", "message": "cancelled with compensate", "reason": "cancelled"}
            # ``at``: the cancel's time, which the history shows as its own entry (engine/progress.py).
            cause.update(step=ex.current_step, attempt=ex.attempt, at=parts.clock.now())
            new, effects = tr.compensating_state(ex, first, cause, parts.clock.now(), parts.config)
        else:
            new, effects = tr.cancelled_state(ex, parts.clock.now(), parts.config), tr.Effects()
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except ConflictError as exc:
            ex = exc.current if isinstance(exc.current, Execution) else get(parts, execution_id)
            continue
        if first is not None:
            execution_log(new).warning("compensation.started", cause=new.error, first_step=first)
            dispatch(parts, effects)
        else:
            execution_log(new).info("execution.cancelled")
        # Parent first, then its child: the child's end then finds the parent terminal and
        # changes nothing (the other order would let the parent retry with a new child).
        cancel_children(parts, ex)
        notify_parent(parts, new)
        return new
    raise ConflictError(f"execution {execution_id!r} kept changing; try again")


def first_to_undo(parts: Parts, ex: Execution) -> int | None:
    """Where a cancel with compensate starts undoing: the current step if it committed, else below.

    The current step may be running right now. A final failure recorded for its current
    attempt fences it (FAILED_IS_FINAL refuses that run's late commit); if the record is
    COMPLETED instead, the step committed and is undone too.

    Raises ``CompensationNotDeployed`` when no registered definition has the execution's
    shape (it is BLOCKED, or will be): the undo is that definition's code (nothing written).
    """
    spec = parts.registry.matching(ex.workflow, ex.fingerprint, ex.workflow_version)
    if spec is None:
        raise CompensationNotDeployed(
            f"execution {ex.id!r} ({ex.status.value}) cannot be cancelled with compensate: its compensations "
            f"belong to the definition it started on (workflow {ex.workflow!r} version {ex.workflow_version}), "
            "which this deployment does not have. Deploy that version again (the execution resumes and the "
            "cancel can undo then), migrate it (loom migrate, for one blocked at a step), or cancel it "
            "without compensate (nothing is undone)",
            workflow=ex.workflow,
            workflow_version=ex.workflow_version,
            status=ex.status.value,
        )
    if not spec.has_compensation:
        return None
    below = tr.compensable_below(spec, ex.current_step)
    st = spec.steps[ex.current_step] if ex.current_step < len(spec.steps) else None
    if not isinstance(st, StepSpec) or st.compensate is None or ex.status is not Status.RUNNING:
        return below
    if isinstance(st, FanoutSpec):
        return ex.current_step  # its committed items are undone; engine/fan_undo.py fences the rest
    now = parts.clock.now()
    info = {"type": "Cancelled", "message": "the execution was cancelled with compensate"}
    fence = Attempt(ex.attempt, now, now, AttemptOutcome.FAILED, info)
    if parts.store.record_failure(ex.id, ex.current_step, st.name, fence, final=True):
        return below
    record = parts.store.get_step(ex.id, ex.current_step, st.name)
    committed = record is not None and record.status is StepStatus.COMPLETED
    return ex.current_step if committed else below


def item_record_of(parts: Parts, parent: Execution, kid: Execution) -> StepRecord | None:
    """The fan-out item record a child item belongs to (None for a plain child, or no record yet)."""
    link = kid.parent or {}
    if "item" not in link or parent.current_step != link.get("step"):
        return None
    join = parts.store.get_join(parent.id, parent.current_step)
    if join is None:
        return None
    return parts.store.get_item(parent.id, parent.current_step, int(link["item"]), join.shards)


def parent_waits_on(parent: Execution, kid: Execution, item: StepRecord | None) -> bool:
    """Pure: ``parent`` still waits on ``kid``. A plain child: the parent's wait names it. A
    fan-out child item: the parent is at that step and attempt and the item has not recorded
    the attempt the child is for (child ids end ``--<step>-<item attempt>-<item>``)."""
    link = kid.parent or {}
    if "item" not in link:
        w = parent.wait
        return parent.status is Status.WAITING and w is not None and w.kind is WaitKind.CHILD and w.child_id == kid.id
    if parent.status is not Status.RUNNING or parent.current_step != link.get("step"):
        return False
    if parent.attempt != link.get("attempt"):
        return False
    item_attempt = int(kid.id.rsplit("--", 1)[-1].split("-")[1])
    final = item is not None and item.status in (StepStatus.COMPLETED, StepStatus.FAILED)
    return not final and last_attempt(item) < item_attempt


def parent_of(parts: Parts, kid: Execution) -> Execution | None:
    """``kid``'s parent as the table holds it (None for a top-level execution, or a parent gone)."""
    parent_id = str(kid.parent.get("id", "")) if kid.parent else ""
    return parts.store.get_execution(parent_id) if parent_id else None


def still_waited_on(parts: Parts, parent: Execution | None, kid: Execution) -> bool:
    """``parent`` still waits on ``kid``: its end notice not taken yet (reads the item record)."""
    return parent is not None and parent_waits_on(parent, kid, item_record_of(parts, parent, kid))


def cancel_children(parts: Parts, ex: Execution) -> None:
    """After a parent is cancelled: cancel the child it waited for, or the child its current
    step may have started before parking on it (and their children, recursively)."""
    cancel_items(parts, ex)  # a fan-out step's running child items
    for cid in _children_at_the_cancel(parts, ex):
        cancel_child(parts, ex, cid)


def _children_at_the_cancel(parts: Parts, ex: Execution) -> list[str]:
    """``ex`` is the parent as the cancel found it. Its worker starts a child before it parks
    on it, so a RUNNING parent at a child step may already have one that no wait names yet."""
    w = ex.wait
    if w is not None and w.kind is WaitKind.CHILD and w.child_id is not None:
        return [w.child_id]
    if ex.status is Status.RUNNING and _at_child_step(parts, ex):
        return [child_id(ex.id, ex.current_step, ex.attempt)]
    return []


def _at_child_step(parts: Parts, ex: Execution) -> bool:
    try:
        spec = parts.registry.of(ex)
    except LoomError:
        return False
    return ex.current_step < len(spec.steps) and isinstance(spec.steps[ex.current_step], ChildSpec)


def cancel_child(parts: Parts, parent: Execution, cid: str) -> None:
    try:
        cancel(parts, cid)
    except LoomError as exc:
        execution_log(parent).info("child.cancel_skipped", child_id=cid, reason=exc.code)


def cancel_running_children(parts: Parts, ex: Execution) -> None:
    """Cancel every child of a CANCELLED parent that is still running (a repeated cancel's cascade)."""
    for kid in children_of(parts, ex):
        if not Status(kid["status"]).terminal:
            cancel_child(parts, ex, kid["id"])


def cancel_items(parts: Parts, ex: Execution) -> None:
    """After P is cancelled at a fan-out step with child items: cancel the children still running."""
    try:
        st = parts.registry.of(ex).steps[ex.current_step]
    except (LoomError, IndexError):
        return
    if not isinstance(st, FanoutSpec) or not any(isinstance(b, ChildSpec) for b in st.branches):
        return
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return
    records = {r.index: r for r in parts.store.fan_items(ex.id, ex.current_step, join.shards, 0, join.n)}
    final = [i for i, r in records.items() if r.status in (StepStatus.COMPLETED, StepStatus.FAILED)]
    for idx in to_resend(join.n, join.window, final):
        cid = item_child_id(ex.id, ex.current_step, last_attempt(records.get(idx)) + 1, idx)
        try:
            cancel(parts, cid)
        except LoomError:
            continue  # never started, or already ended


def child_id(parent_id: str, step: int, attempt: int) -> str:
    """Deterministic, so a restarted parent finds the child it started instead of starting two."""
    suffix = f"--{step}-{attempt}"
    if len(parent_id) + len(suffix) <= MAX_EXECUTION_ID:
        return parent_id + suffix
    return "c" + hashlib.sha256(parent_id.encode()).hexdigest()[:40] + suffix


def item_child_id(parent_id: str, step: int, attempt: int, idx: int) -> str:
    suffix = f"--{step}-{attempt}-{idx}"
    if len(parent_id) + len(suffix) <= MAX_EXECUTION_ID:
        return parent_id + suffix
    return "c" + hashlib.sha256(parent_id.encode()).hexdigest()[:40] + suffix


def children_of(parts: Parts, ex: Execution) -> list[dict[str, Any]]:
    """Every child this execution started, with its status (for GET /executions/{id})."""
    try:
        spec = parts.registry.of(ex)
    except LoomError:
        return []
    if not any(isinstance(s, ChildSpec) for s in spec.steps):
        return []
    ids: list[str] = []
    for record in parts.store.history(ex.id):
        ids += [str(a.detail["child"]) for a in record.attempts if a.detail and "child" in a.detail]
    if ex.wait is not None and ex.wait.child_id and ex.wait.child_id not in ids:
        ids.append(ex.wait.child_id)
    if ex.current_step < len(spec.steps) and isinstance(spec.steps[ex.current_step], ChildSpec):
        # The current attempt's child is in no history record yet (and a cancel clears the wait).
        current = child_id(ex.id, ex.current_step, ex.attempt)
        if current not in ids:
            ids.append(current)
    found = []
    for cid in ids:
        kid = parts.store.get_execution(cid)
        if kid is None:
            continue
        found.append({"id": cid, "workflow": kid.workflow, "status": kid.status.value})
    return found
