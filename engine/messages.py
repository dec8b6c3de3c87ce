"""The step message: a pointer to (execution, step, attempt), never the state itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from engine.errors import MalformedMessage
from engine.limits import check_execution_id, check_message

if TYPE_CHECKING:
    from engine.state import Execution


class MessageKind(StrEnum):
    """Why a step message exists; it decides how carefully the runner treats it."""

    STEP = "step"  # the happy path: the previous step (or start) sent it
    RETRY = "retry"  # the next attempt after a failure, sent with the backoff delay
    REDRIVE = "redrive"  # the sweeper or a DLQ redrive took the execution over
    WAKE = "wake"  # the end of a short sleep
    CHILD_DONE = "child_done"  # a child execution ended: its parent's wait (step, attempt) looks at it
    COMPENSATE = "compensate"  # run the compensation (step, attempt) of a COMPENSATING execution
    ITEM = "item"  # run item ``item`` of the fan-out step (step, attempt) (engine/fanout.py)

    @property
    def guarded(self) -> bool:
        """Messages that exist because something may have gone wrong before."""
        # A compensation always runs guarded: undoing twice is worth a start mark (engine/compensation.py).
        return self in (MessageKind.RETRY, MessageKind.REDRIVE, MessageKind.COMPENSATE)


KINDS: tuple[str, ...] = tuple(k.value for k in MessageKind)

# The SQS message attribute a delayed message carries its DelaySeconds in: the time a message
# was held back on purpose is not time it waited behind a backlog (engine/batch.py::queue_wait).
DELAY_ATTRIBUTE = "loom_delay"


@dataclass(frozen=True)
class StepMessage:
    execution_id: str
    step: int
    attempt: int = 1
    kind: MessageKind = MessageKind.STEP
    # The item (or branch) index of an ITEM message; absent from every other message's body.
    item: int | None = None

    def __post_init__(self) -> None:
        # Accept the plain string too ("retry"): the value is what travels on the wire.
        object.__setattr__(self, "kind", MessageKind(self.kind))
        if (self.kind is MessageKind.ITEM) != (self.item is not None):
            raise MalformedMessage("an item message, and only an item message, carries an item index")

    def encode(self) -> str:
        fields: dict[str, Any] = {
            "v": 1,
            "execution_id": self.execution_id,
            "step": self.step,
            "attempt": self.attempt,
            "kind": self.kind.value,
        }
        if self.item is not None:
            fields["item"] = self.item
        body = json.dumps(fields, separators=(",", ":"))
        check_message(body)
        return body

    @classmethod
    def redrive_of(cls, ex: Execution) -> StepMessage:
        """A guarded message for the execution's current attempt: what the sweeper sends for a
        lapsed lease, a redrive sends, and a redelivery that adopts an attempt runs."""
        return cls(ex.id, ex.current_step, ex.attempt, MessageKind.REDRIVE)

    @property
    def needs_guard(self) -> bool:
        return self.kind.guarded

    @classmethod
    def decode(cls, body: str) -> StepMessage:
        try:
            data: Any = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise MalformedMessage(f"message body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise MalformedMessage("message body is not a JSON object")
        try:
            execution_id = check_execution_id(data["execution_id"])
            step, attempt, kind = data["step"], data.get("attempt", 1), data.get("kind", "step")
        except KeyError as exc:
            raise MalformedMessage(f"message has no {exc.args[0]!r}") from exc
        except Exception as exc:
            raise MalformedMessage(str(exc)) from exc
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise MalformedMessage("message 'step' must be a non-negative integer")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise MalformedMessage("message 'attempt' must be a positive integer")
        if kind not in KINDS:
            raise MalformedMessage(f"message 'kind' must be one of {KINDS}")
        item = data.get("item")
        if item is not None and (not isinstance(item, int) or isinstance(item, bool) or item < 0):
            raise MalformedMessage("message 'item' must be a non-negative integer")
        return cls(execution_id=execution_id, step=step, attempt=attempt, kind=MessageKind(kind), item=item)
