"""Every error Loom raises, in one stdlib-only module.

Adapters translate AWS errors into these (``raise ... from exc``) so that the
engine, the handlers and the CLI never look at botocore error codes.
"""

from __future__ import annotations


class LoomError(Exception):
    """Base of every Loom error. ``code`` is stable and goes into API answers."""

    code = "loom_error"

    def __init__(self, message: str = "", **details: object) -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()
        self.details = details


# --- bad input: the caller's fault, nothing written -------------------------


class InvalidInput(LoomError):
    """The request or its payload is malformed."""

    code = "invalid_input"


class InvalidExecutionId(InvalidInput):
    """Execution ids are 1 to 128 characters of letters, digits, '-' and '_'."""

    code = "invalid_execution_id"


class UnknownWorkflow(InvalidInput):
    """No workflow is registered under that name."""

    code = "unknown_workflow"


class PayloadTooLarge(InvalidInput):
    """A payload would exceed an AWS size limit (DynamoDB item 400 KB, SQS message 256 KB)."""

    code = "payload_too_large"


class MalformedMessage(InvalidInput):
    """A queue message is not a Loom step message."""

    code = "malformed_message"


class WorkflowDefinitionError(LoomError):
    """A workflow definition is invalid (raised at import/registration time)."""

    code = "invalid_workflow_definition"


class InvalidSchedule(WorkflowDefinitionError, ValueError):
    """A schedule expression EventBridge would reject (a ValueError too, for the kit's callers)."""

    code = "invalid_schedule"


class MalformedToken(InvalidInput):
    """A callback token is not one Loom issued (it cannot even be read)."""

    code = "malformed_token"


# --- state conflicts ---------------------------------------------------------


class ConflictError(LoomError):
    """A conditional write lost: someone else moved the item first.

    ``current`` is the item that won, as the store decoded it (an ``Execution`` or a
    ``StepRecord``), when the store returned it; None when it did not (or the item is gone).
    """

    code = "conflict"

    def __init__(self, message: str = "", *, current: object = None, **details: object) -> None:
        super().__init__(message, **details)
        self.current = current


class ExecutionAlreadyExists(ConflictError):
    """An execution with this id exists with a different input."""

    code = "execution_exists"


class DefinitionChanged(LoomError):
    """No registered definition has the shape an execution started with (a deploy changed its
    workflow): nothing runs, the execution is BLOCKED until one is deployed or it is migrated.

    Not a ConflictError: no write lost a race, and treating it as one would hide it."""

    code = "definition_changed"


class CompensationNotDeployed(DefinitionChanged):
    """A cancel with compensate of an execution whose definition this deployment lacks: its
    compensations are that definition's code, so none can run. Deploy that version again (it
    resumes, and the cancel can undo then), migrate it (one blocked at a step), or cancel
    without compensate (nothing is undone). Nothing is written."""

    code = "compensation_not_deployed"


class ExecutionBlocked(DefinitionChanged):
    """A callback failure (or another request the definition must decide) for an execution
    that is BLOCKED: retry it after ``retry_after`` seconds, once the execution has resumed.
    Nothing is written."""

    code = "execution_blocked"


class WorkflowNotRegistered(DefinitionChanged):
    """A request about an execution whose workflow this deployment does not register at all (a
    restart or deploy without the module that defines it): what its steps and waits are is
    that code's, so nothing can be decided. The message names the workflow and the fix.
    Nothing is written; the same request succeeds once the workflow is registered again."""

    code = "workflow_not_registered"


class ExecutionNotFound(LoomError):
    """No execution with this id."""

    code = "execution_not_found"


class CallbackNotFound(ExecutionNotFound):
    """No wait is waiting for this callback token."""

    code = "callback_not_found"


class WaitEnded(ConflictError):
    """The wait this completion is for has ended: completed otherwise, timed out, superseded by
    a retry, or its execution ended. For good, unlike the other conflicts (a retry may win one):
    the API answers 410 Gone, and the message says what ended it. A token never issued is
    ``CallbackNotFound`` (404) instead."""

    code = "wait_ended"


class AlreadyTerminal(ConflictError):
    """The execution already finished (COMPLETED, FAILED or CANCELLED)."""

    code = "already_terminal"


class NotFailed(ConflictError):
    """Only a FAILED execution can be re-driven."""

    code = "not_failed"


class NotBlocked(ConflictError):
    """A migration was asked for an execution that is not BLOCKED at a step."""

    code = "not_blocked"


class ParentDecides(ConflictError):
    """A failed child whose parent no longer waits on it is its parent's to redo: re-drive the parent."""

    code = "parent_decides"


# --- infrastructure ----------------------------------------------------------


class TransientError(LoomError):
    """A dependency failed in a way worth retrying (throttling, timeouts, 5xx)."""

    code = "transient"


class ResourceMissing(LoomError):
    """A table or queue Loom was configured with does not exist."""

    code = "resource_missing"


# --- raised by user steps ----------------------------------------------------


class NonRetryableError(Exception):
    """Raise from a step to fail it at once, whatever the retry policy says."""


class WorkerLost(Exception):
    """The worker died while this attempt ran; the attempt counts as failed."""


class ResultTooLarge(NonRetryableError):
    """The step's result would push the execution over DynamoDB's 400 KB item limit."""


class InvalidResult(NonRetryableError):
    """A step must return a JSON-serialisable dict or None."""


# --- how a wait's attempt fails (ordinary, retryable errors: the step's policy decides) ---


class WaitTimeout(Exception):
    """A wait's timeout passed before its completion."""


class CallbackTimeout(WaitTimeout):
    """No completion arrived for the callback before its timeout."""


class HeartbeatTimeout(WaitTimeout):
    """The outside system sent no heartbeat within the callback's heartbeat timeout."""


class SignalTimeout(WaitTimeout):
    """No signal arrived before the wait's timeout."""


class PollExhausted(WaitTimeout):
    """The check still said not yet when the poll's bound ran out (``max_checks``, or its timeout)."""


class PollTimeout(PollExhausted):
    """The check still said not yet when the poll's timeout passed."""


class CallbackFailed(Exception):
    """The outside system completed the callback with a failure."""


class ChildFailed(Exception):
    """The child execution ended FAILED or CANCELLED."""


# --- how a callback handle's wait fails (engine/handles.py): for good, a retry would read the
# same handle again; a catch handler takes over. Each is also its single-wait kin, for filters.


class HandleFailed(CallbackFailed, NonRetryableError):
    """The outside system completed a callback handle the wait awaits with a failure."""


class HandleTimeout(CallbackTimeout, NonRetryableError):
    """A callback handle the wait awaits was not completed before its timeout."""


class HandleHeartbeatTimeout(HeartbeatTimeout, NonRetryableError):
    """No heartbeat came for a callback handle the wait awaits within its heartbeat timeout."""


# --- how a fan-out step fails (engine/fanout.py): non-retryable, a catch or compensation takes over ---


class InvalidFanoutItems(NonRetryableError):
    """A map's items function must return a list of JSON values, at most MAX_ITEMS of them,
    and the same list every time it is asked (it is a function of the unchanged context)."""


class FanoutFailed(NonRetryableError):
    """More items (or branches) failed than the completion policy tolerates."""
