"""Sending step messages after a durable write, and the loggers bound to what they are about."""

from __future__ import annotations

from typing import Any

from engine import transitions as tr
from engine.error_report import error_info
from engine.errors import LoomError, ResourceMissing
from engine.log import get_logger
from engine.messages import MessageKind, StepMessage
from engine.parts import Parts
from engine.state import Execution


def send(parts: Parts, message: StepMessage, delay: int) -> bool:
    """Send after the state is durable; a failed send is left to the lease, not raised.
    False when it failed (for a caller that must not forget it: a child's end notice)."""
    try:
        parts.queue.send(message, min(delay, parts.config.max_sqs_delay))
    except ResourceMissing:
        raise  # a missing queue is a deployment error to report, not a hiccup to ride out
    except LoomError as exc:
        # The state is durable and carries a wake time: the sweeper will re-drive it.
        message_log(message).warning("message.send_failed", error=error_info(exc))
        return False
    return True


def dispatch(parts: Parts, effects: tr.Effects) -> None:
    if effects.run_next is not None:
        send(parts, effects.run_next, 0)
    if effects.delayed is not None:
        send(parts, *effects.delayed)


def message_log(message: StepMessage) -> Any:
    return get_logger(execution_id=message.execution_id, step=message.step, attempt=message.attempt)


def execution_log(ex: Execution) -> Any:
    return get_logger(execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)


def engine_log() -> Any:
    return get_logger(execution_id=None, step=None, attempt=None)


def notify_parent(parts: Parts, child: Execution) -> bool:
    """Tell the parent its child ended (after the child's terminal write; a lost send is
    covered by the sweeper, which finds the terminal child still indexed). False when the
    send failed: the sweeper then keeps the child indexed, to send it again."""
    p = child.parent
    if p is None or not child.terminal:
        return True
    if p.get("item") is not None:  # a fan-out item's child (engine/fan_children.py)
        item = StepMessage(str(p["id"]), int(p["step"]), int(p["attempt"]), MessageKind.ITEM, item=int(p["item"]))
        return send(parts, item, 0)
    return send(parts, StepMessage(str(p["id"]), int(p["step"]), int(p["attempt"]), MessageKind.CHILD_DONE), 0)
