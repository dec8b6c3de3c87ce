"""Working off the dead-letter queue: what each parked message is, and what redriving it does.

The DLQ holds two kinds of Loom messages: ``{"loom": "failed", ...}`` records the engine
parks when it gives up on an execution, and raw step messages SQS moved there after
``maxReceiveCount`` failed deliveries. Both point at an execution; what to do depends on
where that execution is now, not on what the message says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from engine.error_report import error_info
from engine.errors import LoomError, MalformedMessage
from engine.messages import MessageKind, StepMessage
from engine.ports import Queue, Store
from engine.state import Execution, Status, WaitKind


class Engine(Protocol):
    """What redriving needs of ``engine.runtime.Engine`` (named here, not imported: it is above this layer)."""

    store: Store
    queue: Queue

    def redrive_failed(self, execution_id: str) -> Execution: ...


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    receipt: str
    body: Any  # the parsed JSON body, or the raw text when it is not JSON
    sent_at: float
    receive_count: int

    @property
    def kind(self) -> str:
        """failed | compensation_failed | step | malformed | unknown"""
        body = self.body
        if isinstance(body, dict) and body.get("loom") in ("failed", "compensation_failed", "malformed"):
            return str(body["loom"])
        if isinstance(body, dict) and "execution_id" in body and "step" in body:
            return "step"
        return "unknown"

    @property
    def execution_id(self) -> str | None:
        if self.kind in ("failed", "compensation_failed"):
            found = self.body.get("execution_id")
            return found if isinstance(found, str) else None
        if self.kind == "step":
            try:
                return StepMessage.decode(json.dumps(self.body)).execution_id
            except MalformedMessage:
                return None
        return None


class DeadLetterBox(Protocol):
    def receive(self, limit: int, visibility: int = ...) -> Iterator[DeadLetter]: ...

    def peek(self, limit: int) -> list[DeadLetter]: ...

    def release(self, receipts: list[str]) -> None: ...

    def delete(self, receipt: str) -> None: ...

    def approximate_count(self) -> int: ...


@dataclass(frozen=True)
class RedriveResult:
    message_id: str
    kind: str
    execution_id: str | None
    # redriven: FAILED execution given a new round of attempts
    # resent: RUNNING execution, a guarded message for its current step was sent; or an
    #         execution WAITING on a child, its end notice was sent (``child_notice``)
    # dropped: nothing left to do (deleted from the DLQ), see ``reason``
    # kept: left in the DLQ (not a Loom execution message, or the action failed)
    action: str
    reason: str = ""
    status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def redrive(engine: Engine, box: DeadLetterBox, limit: int) -> list[RedriveResult]:
    """Deal with up to ``limit`` DLQ messages; delete each one only once dealt with."""
    results: list[RedriveResult] = []
    keep: list[str] = []
    handled: set[str] = set()
    for letter in box.receive(limit):
        result = _redrive_one(engine, letter, handled)
        if result.action in ("redriven", "resent", "dropped"):
            try:
                box.delete(letter.receipt)
            except LoomError as exc:
                # Done but still parked: a second redrive finds the execution RUNNING and
                # only sends a guarded message, which is harmless.
                result = RedriveResult(
                    letter.message_id,
                    result.kind,
                    result.execution_id,
                    result.action,
                    f"{result.reason}; deleting it from the DLQ failed: {exc.message}".lstrip("; "),
                    result.status,
                )
        else:
            keep.append(letter.receipt)
        results.append(result)
    if keep:
        # Make what was not dealt with visible again now, not after the work visibility.
        box.release(keep)
    return results


def _redrive_one(engine: Engine, letter: DeadLetter, handled: set[str]) -> RedriveResult:
    kind, execution_id = letter.kind, letter.execution_id

    def result(action: str, reason: str = "", status: str | None = None) -> RedriveResult:
        return RedriveResult(letter.message_id, kind, execution_id, action, reason, status)

    if execution_id is None:
        return result("kept", "not a message about an execution; left in the DLQ for inspection")
    if execution_id in handled:
        return result("dropped", "an earlier message of this pass already redrove this execution")
    try:
        ex = engine.store.get_execution(execution_id)
        if ex is None:
            return result("dropped", "no such execution")
        if ex.status is Status.FAILED and ex.parent is not None:
            return _redrive_child(engine, ex, handled, result)
        if ex.status is Status.FAILED:
            new = engine.redrive_failed(execution_id)
            handled.add(execution_id)
            return result("redriven", f"new round of attempts at step {new.current_step}", new.status.value)
        if ex.status is Status.RUNNING:
            # Guarded ("redrive") so that it is harmless if another message still drives it.
            engine.queue.send(StepMessage.redrive_of(ex))
            handled.add(execution_id)
            return result("resent", f"still RUNNING; sent a message for step {ex.current_step}", ex.status.value)
        notice = child_notice(ex)
        if notice is not None:
            # A parked end notice of its child (throttling outlasted maxReceiveCount): nothing else
            # would wake it. The notice is a pointer: the runner reads the child, a running one
            # changes nothing.
            engine.queue.send(notice)
            handled.add(execution_id)
            return result(
                "resent", f"WAITING on child {ex.wait.child_id if ex.wait else ''}; sent its notice", ex.status.value
            )
        if ex.status is Status.COMPENSATION_FAILED:
            # Undoing again could undo twice what a person may already have fixed by hand.
            reason = "COMPENSATION_FAILED: its error names the cause and the failed compensation; not re-driven"
            return result("kept", reason, ex.status.value)
        if ex.status is Status.SLEEPING:
            return result("dropped", "the execution is SLEEPING; the sweeper wakes it", ex.status.value)
        return result("dropped", f"the execution is already {ex.status.value}", ex.status.value)
    except LoomError as exc:
        return result("kept", f"{exc.code}: {error_info(exc)['message']}")


def _redrive_child(
    engine: Engine, kid: Execution, handled: set[str], result: Callable[..., RedriveResult]
) -> RedriveResult:
    """A FAILED child is its parent's to redo: reviving it would run its work for nobody (the
    parent's attempt has failed already) while the parent's retry starts a fresh child under a
    new id. So a FAILED parent is re-driven instead (once per pass), and any other is left alone."""
    parent_id = str((kid.parent or {}).get("id", ""))
    if parent_id in handled:
        return result("dropped", f"a child: its parent {parent_id} was re-driven in this pass", kid.status.value)
    parent = engine.store.get_execution(parent_id)
    if parent is None or parent.status is not Status.FAILED:
        state = "gone" if parent is None else parent.status.value
        return result("dropped", f"a child: its parent {parent_id} ({state}) decides, not re-driven", kid.status.value)
    if parent.parent is not None:
        return _redrive_child(engine, parent, handled, result)
    new = engine.redrive_failed(parent.id)
    handled.add(parent.id)
    return result("redriven", f"a child: its parent {parent.id} was re-driven instead", new.status.value)


def child_notice(ex: Execution) -> StepMessage | None:
    """The notice that wakes an execution WAITING on a child, for its wait's (step, attempt)."""
    w = ex.wait
    if ex.status is not Status.WAITING or w is None or w.kind is not WaitKind.CHILD:
        return None
    return StepMessage(ex.id, w.step, w.attempt, MessageKind.CHILD_DONE)


def summarize(results: Iterable[RedriveResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.action] = counts.get(r.action, 0) + 1
    return counts
