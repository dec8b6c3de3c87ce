"""The durable state of an execution, as frozen dataclasses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    RUNNING = "RUNNING"
    SLEEPING = "SLEEPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class StepStatus(StrEnum):
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


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

    @property
    def terminal(self) -> bool:
        return self.status.terminal

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
