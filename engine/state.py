"""The durable state of an execution, as frozen dataclasses."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    RUNNING = "RUNNING"
    SLEEPING = "SLEEPING"
    WAITING = "WAITING"  # parked on the outside world (callback, signal, child); see engine/parking.py
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # Saga compensation (engine/compensation.py): undoing the committed steps in reverse order.
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    # No registered definition has the shape the execution started with (engine/definitions.py):
    # nothing runs until one is deployed (it resumes) or it is migrated (``loom migrate``).
    BLOCKED = "BLOCKED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(
    {Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.COMPENSATED, Status.COMPENSATION_FAILED}
)


class StepStatus(StrEnum):
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    # A fan-out item its batch declined: once no item could start, its slot's next one never ran.
    NOT_STARTED = "NOT_STARTED"


class AttemptOutcome(StrEnum):
    """How one attempt of a step ended, as its history record says."""

    COMPLETED = "completed"
    FAILED = "failed"
    WORKER_LOST = "worker_lost"


def canonical_json(value: Any) -> str:
    """One spelling per value, so equal inputs compare equal as strings.

    NaN and infinities are refused: they are not JSON, and other readers would choke on them.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class WaitKind(StrEnum):
    """What a WAITING execution waits for (a poll waits between checks as RUNNING)."""

    CALLBACK = "callback"
    SIGNAL = "signal"
    POLL = "poll"
    CHILD = "child"
    # ``wait_for_callbacks``: the handles it awaits live in their own items (``Handle``).
    HANDLES = "handles"


@dataclass(frozen=True)
class Wait:
    """The wait of the current step and attempt: one optional attribute of the execution item.

    ``deadline`` is the overall timeout, ``heartbeat_deadline`` the callback's heartbeat
    timeout; the execution's ``next_wake_at`` is the earliest of them, so the sweeper
    (GSI1) fires a timeout and nothing runs while the wait lasts.
    """

    kind: WaitKind
    step: int
    attempt: int
    name: str = ""
    token_hash: str | None = None  # sha256 of the callback token's secret; never the token
    deadline: float | None = None
    heartbeat_timeout: float | None = None
    heartbeat_deadline: float | None = None
    child_id: str | None = None
    polls: int = 0
    # A stateful poll's checkpoint, ``{"state": <the last not-yet's state>}``: absent before the
    # first not-yet (so that a state of None is still a state). Kept across the step's retries.
    checkpoint: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", WaitKind(self.kind))

    def wake_at(self) -> float | None:
        times = [t for t in (self.deadline, self.heartbeat_deadline) if t is not None]
        return min(times) if times else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        out["kind"] = self.kind.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Wait:
        return cls(**data)


@dataclass(frozen=True)
class Execution:
    id: str
    workflow: str
    status: Status
    current_step: int
    version: int
    input: dict[str, Any]
    context: dict[str, Any]
    created_at: float
    updated_at: float
    # Sweeper's wake time: the lease of a RUNNING execution, the end of a sleep,
    # or the time of a retry too far off for an SQS delay. None once terminal.
    next_wake_at: float | None = None
    # Attempt of the current step; ``attempt_base`` is where the current round of
    # attempts started (a DLQ redrive starts a new round without reusing numbers).
    attempt: int = 1
    attempt_base: int = 0
    # The attempt recorded as started before it ran (at_most_once steps and
    # redelivered messages); equal to ``attempt`` while that attempt is in flight.
    started_attempt: int = 0
    # When ``started_attempt`` was marked. A guarded runner that finds the mark younger
    # than a lease assumes the attempt is still running elsewhere, not that it died.
    attempt_started_at: float | None = None
    # Earliest time the current attempt may run (retry backoff).
    ready_at: float | None = None
    error: dict[str, Any] | None = None
    # The wait of the current step, while it lasts (engine/parking.py).
    wait: Wait | None = None
    # A child execution's parent: {"id", "step", "attempt"} (engine/children.py).
    parent: dict[str, Any] | None = None
    # While the current step's catch handler runs (engine/catching.py): the failure it handles.
    catching: dict[str, Any] | None = None
    # The shape of the definition it started on (``WorkflowSpec.fingerprint``) and that
    # definition's version; None for executions started before they were recorded (they run
    # on the newest definition, as they always did).
    fingerprint: str | None = None
    workflow_version: int | None = None
    # While BLOCKED: {"reason": "definition_changed", "from": <status it left>, "since": <time>}.
    blocked: dict[str, Any] | None = None
    # Once ended: when retention ends (epoch seconds; DynamoDB TTL deletes it after that, and
    # readers stop showing it at that time). None while it runs, or with retention off.
    expires_at: float | None = None

    @property
    def output(self) -> dict[str, Any]:
        """The context under the name the API, the CLI and the console give it."""
        return self.context

    def expired(self, now: float) -> bool:
        """Past its retention: gone for every reader, whether or not TTL has deleted it yet."""
        return self.expires_at is not None and self.expires_at <= now

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    def waits_at(self, step: int, attempt: int, kind: WaitKind) -> bool:
        """Whether the current step and attempt is the wait (step, attempt) of this kind."""
        w = self.wait
        return (
            not self.terminal
            and self.current_step == step
            and self.attempt == attempt
            and w is not None
            and w.kind is kind
            and w.step == step
            and w.attempt == attempt
        )

    @property
    def round_attempt(self) -> int:
        """The attempt number the retry policy sees (1-based within this round)."""
        return self.attempt - self.attempt_base

    def evolve(self, now: float, **changes: Any) -> Execution:
        """The next version of this execution: every transition bumps version by one."""
        return replace(self, version=self.version + 1, updated_at=now, **changes)


@dataclass(frozen=True)
class Attempt:
    attempt: int
    started_at: float
    finished_at: float
    outcome: AttemptOutcome
    error: dict[str, Any] | None = None
    retry_delay: float | None = None
    # What a wait's attempt was completed with (a callback's token hash, the signal consumed).
    detail: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", AttemptOutcome(self.outcome))

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": self.outcome.value,
            "error": self.error,
            "retry_delay": self.retry_delay,
            **({"detail": self.detail} if self.detail is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            attempt=int(data["attempt"]),
            started_at=float(data["started_at"]),
            finished_at=float(data["finished_at"]),
            outcome=AttemptOutcome(data["outcome"]),
            error=data.get("error"),
            retry_delay=None if data.get("retry_delay") is None else float(data["retry_delay"]),
            detail=data.get("detail"),
        )


@dataclass(frozen=True)
class StepRecord:
    execution_id: str
    index: int
    name: str
    status: StepStatus
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # A map item's name from its ``item_namer`` (engine/fan_items.py); None for every other record.
    label: str | None = None


class HandleStatus(StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"  # its timeout or its heartbeat deadline passed (``error`` says which)


HANDLE_TOKEN_PREFIX = "lcb2"


@dataclass(frozen=True)
class Handle:
    """A callback handle (``create_callback``): one item of the execution, keyed by the index
    of the step that created it, completed from outside before or while a wait awaits it.

    ``secret`` is kept so that any later step can hand the same token out again
    (DESIGN.md, "Callback handles"); no view, log or history ever shows it. ``version``
    makes every change after the creation a conditional write (first completion wins).
    """

    execution_id: str
    step: int
    name: str
    secret: str
    created_at: float
    deadline: float | None = None
    heartbeat_timeout: float | None = None
    heartbeat_deadline: float | None = None
    status: HandleStatus = HandleStatus.PENDING
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    body: str | None = None  # the completion's digest: the same completion again is a repeat
    completed_at: float | None = None
    version: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", HandleStatus(self.status))

    @property
    def token(self) -> str:
        return f"{HANDLE_TOKEN_PREFIX}.{self.execution_id}.{self.step}.{self.secret}"

    @property
    def token_hash(self) -> str:
        return hashlib.sha256(self.secret.encode()).hexdigest()

    @property
    def pending(self) -> bool:
        return self.status is HandleStatus.PENDING

    def wake_at(self) -> float | None:
        times = [t for t in (self.deadline, self.heartbeat_deadline) if t is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class Signal:
    """A named message sent to an execution, kept until one wait of that name consumes it.

    ``key`` orders the signals of one name by arrival (``<received_at>#<uuid>``);
    ``consumed_by`` is ``"<step>:<attempt>"`` of the wait that took it, or None.
    """

    execution_id: str
    name: str
    key: str
    payload: dict[str, Any]
    received_at: float
    consumed_by: str | None = None


@dataclass(frozen=True)
class ScheduleCursor:
    """Where a scheduled workflow's firings stand (engine/schedules.py): one item per workflow.

    ``next_fire`` is the first fire time not yet claimed (None: the expression has none left).
    A firing is claimed by moving ``next_fire`` past it and setting ``pending`` to its fire time
    in one conditional write; its execution is started after that, and ``pending`` is cleared
    (``last_fired`` set) once the start is known to have happened. A sweeper that dies in
    between leaves ``pending`` for the next tick, whose start of the same id is idempotent.
    """

    workflow: str
    expression: str
    next_fire: float | None
    version: int = 1
    pending: float | None = None
    last_fired: float | None = None
    updated_at: float = 0.0

    def moved(self, now: float, **changes: Any) -> ScheduleCursor:
        """The next version of the cursor with ``changes``."""
        return replace(self, version=self.version + 1, updated_at=now, **changes)
