"""Standard-queue delivery for the local event source: out of order, now and then twice.

A standard SQS queue promises at-least-once delivery in roughly send order:
a message can arrive after later ones, and the same message can arrive more
than once. The emulator hands messages out in strict send order and exactly
once, so code that leans on order or on single delivery passes locally and
breaks in AWS. This shuffles what the local event source mapping delivers:

- every batch is shuffled;
- a received message is, at ``rate``, held back to a later batch (at most once;
  its visibility timeout keeps running, as it would on a slow poller);
- a delivered message is, at ``rate``, delivered once more in a later batch: the
  same MessageId, body and attributes, with a receipt handle of its own
  (:data:`DUPLICATE_RECEIPT_PREFIX`) that the event source does not delete.

Decisions come from ``random.Random(seed)``: the same seed and the same
sequence of receives give the same deliveries. Rate 0 passes batches through
untouched (and still releases anything held before the rate was lowered).
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass
from typing import Any

DUPLICATE_RECEIPT_PREFIX = "loom-duplicate:"


@dataclass(frozen=True)
class ChaosCounts:
    batches: int
    reordered: int  # batches delivered in an order other than the receive order
    held: int  # messages delivered in a later batch than the one that received them
    duplicated: int  # extra deliveries of an already delivered message


def is_duplicate(message: dict[str, Any]) -> bool:
    return str(message.get("ReceiptHandle", "")).startswith(DUPLICATE_RECEIPT_PREFIX)


def check_rate(rate: float) -> float:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"the standard-queue chaos rate is a probability between 0 and 1, not {rate}")
    return float(rate)


class StandardQueueChaos:
    """Shared by every poller of one event source (thread-safe)."""

    def __init__(self, rate: float = 0.0, seed: int = 0) -> None:
        self._rate = check_rate(rate)
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._held: list[dict[str, Any]] = []
        self._replay: list[dict[str, Any]] = []
        self._batches = self._reordered = self._held_count = self._duplicated = 0

    @property
    def rate(self) -> float:
        return self._rate

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = check_rate(rate)

    def counts(self) -> ChaosCounts:
        with self._lock:
            return ChaosCounts(self._batches, self._reordered, self._held_count, self._duplicated)

    def pending(self) -> int:
        """Messages waiting for a later batch (held or to be duplicated)."""
        with self._lock:
            return len(self._held) + len(self._replay)

    def arrange(self, received: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
        """The batch to deliver now (at most ``limit``), given what a poller just received."""
        with self._lock:
            carried, self._held = self._held, []
            replay, self._replay = self._replay, []
            if self._rate <= 0:
                batch = replay + carried + received
            else:
                batch = replay + carried + [m for m in received if not self._hold(m)]
                order = list(batch)
                self._rng.shuffle(batch)
                if batch != order:
                    self._reordered += 1
            batch, overflow = batch[:limit], batch[limit:]
            # What does not fit waits for the next batch (the event source receives less meanwhile).
            self._replay.extend(m for m in overflow if is_duplicate(m))
            self._held.extend(m for m in overflow if not is_duplicate(m))
            self._duplicated += sum(1 for m in batch if is_duplicate(m))
            if self._rate > 0:
                for message in batch:
                    if not is_duplicate(message) and self._rng.random() < self._rate:
                        self._replay.append(_duplicate(message))
            if batch:
                self._batches += 1
            return batch

    def _hold(self, message: dict[str, Any]) -> bool:
        if self._rng.random() >= self._rate:
            return False
        self._held.append(message)
        self._held_count += 1
        return True


def _duplicate(message: dict[str, Any]) -> dict[str, Any]:
    copy = dict(message)
    copy["ReceiptHandle"] = f"{DUPLICATE_RECEIPT_PREFIX}{uuid.uuid4()}"
    return copy
