"""A step queue on virtual time: delays and visibility timeouts move with the test's clock."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.clock import FakeClock
from engine.messages import DELAY_ATTRIBUTE, StepMessage


@dataclass
class Queued:
    message_id: str
    body: str
    visible_at: float
    receive_count: int = 0
    sent_at: float = 0.0
    delay_seconds: int = 0
    # SQS's ApproximateFirstReceiveTimestamp: the engine reads the queue's wait from it.
    first_received_at: float | None = None


def sqs_timing(
    sent_at: float, first_received_at: float | None, delay_seconds: int
) -> tuple[dict[str, str], dict[str, Any]]:
    """What a Lambda SQS record says of a message's time in the queue: its two timestamps (ms)
    for ``attributes``, and the delay it was sent with (``DELAY_ATTRIBUTE``) for
    ``messageAttributes``; the engine reads the queue's wait from them (engine/batch.py)."""
    first = sent_at if first_received_at is None else first_received_at
    stamps = {"SentTimestamp": str(int(sent_at * 1000)), "ApproximateFirstReceiveTimestamp": str(int(first * 1000))}
    held = {DELAY_ATTRIBUTE: {"stringValue": str(delay_seconds), "dataType": "Number"}} if delay_seconds else {}
    return stamps, held


@dataclass
class VirtualQueue:
    """Implements ``engine.ports.Queue``; what SQS would hold, with time taken from ``clock``."""

    clock: FakeClock
    visibility_timeout: float = 20.0  # template.yaml: the heartbeat's extension, after which a dead batch is back
    messages: list[Queued] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    sent: list[tuple[StepMessage, int]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def send(self, message: StepMessage, delay_seconds: int = 0) -> None:
        self.sent.append((message, delay_seconds))
        now = self.clock.now()
        body = message.encode()
        self.messages.append(
            Queued(f"m-{next(self._ids)}", body, now + delay_seconds, sent_at=now, delay_seconds=delay_seconds)
        )

    def send_many(self, messages: Sequence[StepMessage]) -> None:
        for message in messages:
            self.send(message, 0)

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        self.dead_letters.append(body)

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None:
        for queued in self.messages:
            if queued.message_id == receipt_handle:
                queued.visible_at = self.clock.now() + timeout_seconds

    def backlog(self) -> int:
        """Messages waiting to be received: visible now, not in flight, not delayed."""
        now = self.clock.now()
        return sum(1 for q in self.messages if q.visible_at <= now)

    def change_visibility_many(self, receipt_handles: Sequence[str], timeout_seconds: int) -> list[str]:
        for receipt in receipt_handles:
            self.change_visibility(receipt, timeout_seconds)
        return []

    def parked(self) -> int:
        """The dead-letter queue's count: the engine's records (this queue never parks a message)."""
        return len(self.dead_letters)

    # what the test runner does as Lambda's event source
    def receive(self) -> Queued | None:
        """The oldest visible message, now in flight for a visibility timeout."""
        now = self.clock.now()
        visible = [q for q in self.messages if q.visible_at <= now]
        if not visible:
            return None
        chosen = min(visible, key=lambda q: (q.visible_at, q.sent_at))
        chosen.receive_count += 1
        if chosen.first_received_at is None:
            chosen.first_received_at = now
        chosen.visible_at = now + self.visibility_timeout
        return chosen

    def delete(self, queued: Queued) -> None:
        self.messages = [q for q in self.messages if q is not queued]

    def copy_of(self, queued: Queued) -> Queued:
        """A duplicate delivery: the same body under another id, visible now."""
        twin = Queued(
            f"m-{next(self._ids)}",
            queued.body,
            self.clock.now(),
            sent_at=queued.sent_at,
            delay_seconds=queued.delay_seconds,
        )
        self.messages.append(twin)
        return twin

    def next_visible(self) -> float | None:
        return min((q.visible_at for q in self.messages), default=None)
