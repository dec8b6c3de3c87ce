"""The version check: a step runs only on the definition its execution started on.

Every execution records its definition's fingerprint at start (step names, kinds, order;
``WorkflowSpec.fingerprint``). When a worker or the sweeper finds no registered version with
that fingerprint (a deploy inserted, removed or reordered steps), running the current index
would run another step, so the execution is BLOCKED instead (one conditional write, nothing
run). The sweeper's due index looks at it again every ``blocked_recheck_seconds``: once a
version with the same shape is registered again, the recheck puts the status back with a
conditional write and re-drives it. ``engine.control.migrate`` moves it on purpose instead.

Executions without a fingerprint (started before it was recorded) run on the newest version,
as they always did.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from engine import transitions as tr
from engine.errors import ConflictError, UnknownWorkflow, WorkflowNotRegistered
from engine.messages import MessageKind, StepMessage
from engine.outbox import execution_log
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.state import Execution, Status, StepStatus, WaitKind
from engine.workflow import Registry, WorkflowSpec

DEFINITION_CHANGED = "definition_changed"
# No version of its workflow is registered at all (a deploy or a `loom up` without its module):
# blocked as a changed one is, since failing it would lose work the same code can finish.
WORKFLOW_NOT_REGISTERED = "workflow_not_registered"


class Registration(StrEnum):
    """Why an execution's definition is missing from a deployment (None from ``registration``:
    it is there). The values are the codes readers see."""

    NOT_REGISTERED = WORKFLOW_NOT_REGISTERED  # no version of its workflow at all
    SHAPE_CHANGED = DEFINITION_CHANGED  # versions, none with the shape it started on (BLOCKED)


@dataclass(frozen=True)
class Missing:
    """An execution's definition that this deployment lacks, and the one line that says so."""

    code: Registration
    workflow: str
    version: int | None
    registered: tuple[int, ...]  # the workflow's versions that are registered (none: NOT_REGISTERED)
    message: str


def registration(registry: Registry, ex: Execution) -> Missing | None:
    """Whether ``ex``'s definition is registered here (None), or why not; pure, reads nothing.
    What every reader of an execution shows beside it (the API, the CLI, the console, a callback)."""
    version = f" version {ex.workflow_version}" if ex.workflow_version is not None else ""
    try:
        if registry.matching(ex.workflow, ex.fingerprint, ex.workflow_version) is not None:
            return None
        versions = tuple(s.version for s in registry.versions(ex.workflow))
    except UnknownWorkflow:
        message = (
            f"workflow {ex.workflow!r}{version} is not registered in this deployment, so its steps not run yet "
            "and its waits are unknown here; nothing is lost: register it again (deploy the module that defines "
            "it: locally `loom up --parameter WorkflowModules=<its modules>`, with its directory in SOURCES)"
        )
        return Missing(Registration.NOT_REGISTERED, ex.workflow, ex.workflow_version, (), message)
    message = (
        f"workflow {ex.workflow!r} has no registered version with the shape this execution started on{version} "
        f"(registered: {list(versions)}): deploy that version again, or loom migrate"
    )
    return Missing(Registration.SHAPE_CHANGED, ex.workflow, ex.workflow_version, versions, message)


def not_registered(registry: Registry, ex: Execution) -> WorkflowNotRegistered:
    """The refusal of a request about ``ex`` (a callback, a handle's completion, a signal) while
    its workflow is not registered here: one message, the fix, for every such request to raise."""
    missing = registration(registry, ex)
    message = missing.message if missing is not None else f"workflow {ex.workflow!r} is not registered"
    return WorkflowNotRegistered(message, workflow=ex.workflow, execution_id=ex.id)


def workflow_missing(registry: Registry, ex: Execution) -> bool:
    """No version of ``ex``'s own workflow is registered: an ``UnknownWorkflow`` raised while
    handling it is about it (and it is blocked), not about a child's workflow (which fails it)."""
    try:
        registry.get(ex.workflow)
    except UnknownWorkflow:
        return True
    return False


def spec_for(parts: Parts, ex: Execution) -> WorkflowSpec | None:
    """The registered definition ``ex`` runs on, None when none has its shape.

    Raises ``UnknownWorkflow`` when no version of the workflow is registered at all (that is
    a missing workflow, which fails the execution as before, not a changed one).
    """
    return parts.registry.matching(ex.workflow, ex.fingerprint, ex.workflow_version)


def block(parts: Parts, ex: Execution, reason: str = DEFINITION_CHANGED) -> LinkResult:
    """Stop ``ex`` where it is: BLOCKED, reason ``definition_changed`` (or
    ``workflow_not_registered``); nothing runs.

    A lost race means someone moved it first (a cancel, another worker's block): that write
    stands, and this message is stale.
    """
    if ex.status not in tr.BLOCKED_FROM:
        return LinkResult(OutcomeStatus.STALE)
    now = parts.clock.now()
    new = tr.blocked_state(ex, now, parts.config, reason)
    try:
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("execution.block_lost_race")
        return LinkResult(OutcomeStatus.STALE)
    registered = [] if reason == WORKFLOW_NOT_REGISTERED else [s.version for s in parts.registry.versions(ex.workflow)]
    execution_log(new).warning(
        "execution.blocked",
        reason=reason,
        status_before=ex.status.value,
        fingerprint=ex.fingerprint,
        workflow_version=ex.workflow_version,
        registered_versions=registered,
    )
    return LinkResult(OutcomeStatus.BLOCKED, effects=tr.Effects(written=new))


def recheck(parts: Parts, ex: Execution, now: float) -> tuple[bool, StepMessage | None]:
    """The sweeper's look at a due BLOCKED execution: resume it if its definition is back
    (True, and the message that re-drives it if it needs one), else push the next look off.

    Raises ``ConflictError`` when another writer moved it first (the sweeper skips it).
    """
    spec = None if workflow_missing(parts.registry, ex) else spec_for(parts, ex)
    cfg = parts.config
    new = tr.still_blocked_state(ex, now, cfg) if spec is None else _resumed(parts, ex, now)
    parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    if spec is None:
        return False, None
    execution_log(new).info("execution.resumed", status=new.status.value, workflow_version=spec.version)
    return True, resume_message(new)


def _resumed(parts: Parts, ex: Execution, now: float) -> Execution:
    """``resumed_state``, but what only a message would move is given a wake of its own.

    A child wait has no deadline, and the child's end notice was taken while it was blocked: it
    resumes RUNNING at its step with one lease (``children.begin`` finds the child, ended or
    not, and parks again), so a lost redrive is re-driven, not stranded. A callback wait that a
    completion committed while blocked is due at once: ``waits.expire`` rolls a committed wait
    forward, so a sweeper that dies before ``callbacks.finish_kept`` leaves it to the next sweep.
    """
    new = tr.resumed_state(ex, now, parts.config)
    w = ex.wait
    if new.status is not Status.WAITING or w is None:
        return new
    if w.kind is WaitKind.CHILD:
        return replace(new, status=Status.RUNNING, wait=None, next_wake_at=now + parts.config.lease_seconds)
    if w.kind is WaitKind.HANDLES:
        return replace(new, next_wake_at=now)  # a completion kept on a handle meanwhile: settle it
    if w.kind is not WaitKind.CALLBACK:
        return new
    record = parts.store.get_step(ex.id, ex.current_step, w.name)
    if record is None or record.status is not StepStatus.COMPLETED:
        return new
    return replace(new, next_wake_at=now)


def resume_message(ex: Execution) -> StepMessage | None:
    """What re-drives a resumed execution: a guarded redrive for a step, a compensation or a
    child wait (resumed RUNNING: ``_resumed``), a wake for a sleep; a callback or signal wait
    needs none (its completion, kept completion or signal, or its deadline moves it)."""
    if ex.status in (Status.RUNNING, Status.COMPENSATING):
        return StepMessage.redrive_of(ex)
    if ex.status is Status.SLEEPING:
        return StepMessage(ex.id, ex.current_step, ex.attempt, MessageKind.WAKE)
    return None
