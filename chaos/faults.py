"""Fault injectors that act from outside the engine, where real life puts the fault.

The queue is edited through the AWS API, workers are killed by pid (or, under
LocalStack, through the Docker SDK), sweepers are started on top of each other.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from chaos.target import Target
from engine.messages import StepMessage


def peek(target: Target, max_messages: int = 10) -> list[dict[str, Any]]:
    """Copy visible messages without taking them (VisibilityTimeout=0 leaves them to the workers)."""
    answer = target.sqs.receive_message(
        QueueUrl=target.queue_url,
        MaxNumberOfMessages=max_messages,
        VisibilityTimeout=0,
        WaitTimeSeconds=0,
        AttributeNames=["All"],
    )
    return list(answer.get("Messages") or [])


def send_copies(target: Target, bodies: Sequence[str], copies: int = 1) -> int:
    """Send ``copies`` of each body at once (a batch: they arrive at the same moment)."""
    entries = [body for body in bodies for _ in range(copies)]
    sent = 0
    for start in range(0, len(entries), 10):
        chunk = entries[start : start + 10]
        answer = target.sqs.send_message_batch(
            QueueUrl=target.queue_url,
            Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(chunk)],
        )
        sent += len(answer.get("Successful") or [])
    return sent


def step_body(execution_id: str, step: int, attempt: int = 1, kind: str = "step") -> str:
    """The exact body the engine sends for (execution, step, attempt): messages carry nothing else."""
    return StepMessage(execution_id, step, attempt, kind).encode()  # type: ignore[arg-type]


def queue_visibility(target: Target) -> int:
    attrs = target.sqs.get_queue_attributes(QueueUrl=target.queue_url, AttributeNames=["VisibilityTimeout"])
    return int(attrs["Attributes"]["VisibilityTimeout"])


@contextlib.contextmanager
def shortened_visibility(target: Target, seconds: int) -> Iterator[int]:
    """SetQueueAttributes to a shorter visibility timeout; restored afterwards."""
    before = queue_visibility(target)
    target.sqs.set_queue_attributes(QueueUrl=target.queue_url, Attributes={"VisibilityTimeout": str(seconds)})
    try:
        yield before
    finally:
        target.sqs.set_queue_attributes(QueueUrl=target.queue_url, Attributes={"VisibilityTimeout": str(before)})


def queue_depth(target: Target) -> dict[str, int]:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attrs = target.sqs.get_queue_attributes(QueueUrl=target.queue_url, AttributeNames=names)["Attributes"]
    return {n.removeprefix("ApproximateNumberOfMessages") or "Visible": int(attrs.get(n, 0)) for n in names}


def dlq_depth(target: Target) -> int:
    """Messages in the dead-letter queue, visible or not."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attrs = target.sqs.get_queue_attributes(QueueUrl=target.dlq_url, AttributeNames=names)["Attributes"]
    return sum(int(attrs.get(n, 0)) for n in names)


def purge(target: Target) -> None:
    """Lose every message, delayed ones included: the only API that reaches a delayed message."""
    target.sqs.purge_queue(QueueUrl=target.queue_url)


def wait_depth(
    target: Target,
    until: Callable[[dict[str, int]], bool],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> dict[str, int]:
    """Poll the step queue's depth until ``until`` holds or ``timeout`` passes; the last depth seen."""
    deadline = clock() + timeout
    while True:
        depth = queue_depth(target)
        if until(depth) or clock() > deadline:
            return depth
        pause(0.05)


def wait_drained(
    target: Target,
    timeout: float,
    *,
    limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> dict[str, int]:
    """Poll until the step queue holds nothing (visible, in flight or delayed); the last depth seen.

    With ``limit``, ``timeout`` counts from the last time the depth fell to a new low, up to
    ``limit`` seconds in all: a thousand executions leave a long tail of stale copies that
    takes longer than ``timeout`` to work off, while a message that circulates keeps the
    depth from falling and is still caught after ``timeout``.
    """
    began = clock()
    deadline = began + timeout
    lowest: int | None = None
    while True:
        depth = queue_depth(target)
        total = sum(depth.values())
        now = clock()
        if limit is not None and (lowest is None or total < lowest):
            lowest = total
            deadline = min(now + timeout, began + limit)
        if not total or now > deadline:
            return depth
        pause(0.5)
