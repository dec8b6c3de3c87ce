"""An SQS event source mapping, emulated: what Lambda's pollers do for the worker.

Pollers long-poll the queue, gather up to ``batch_size`` messages within the
batching window, invoke the function with a real SQS event, delete the
messages that succeeded and leave the rest (the reported failures, or the whole
batch when the invocation errored, crashed or timed out) to come back after
their visibility timeout. Nothing here is created inside the emulator: moto's
own mappings would consume the messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.log import get_logger
from loom.local.lambdas.events import batch_failures, sqs_event
from loom.local.lambdas.pool import FunctionPool, Invocation, PoolClosed
from loom.local.lambdas.standard_queue import StandardQueueChaos, is_duplicate

MAX_RECEIVE = 10  # SQS's own limit per ReceiveMessage
POLL_WAIT_SECONDS = 2  # long poll; short enough that stopping is quick


@dataclass(frozen=True)
class EsmConfig:
    queue_url: str
    queue_arn: str
    region: str
    batch_size: int = 10
    batching_window: float = 0.0
    report_batch_item_failures: bool = True


@dataclass(frozen=True)
class BatchOutcome:
    invocation: Invocation
    received: int
    deleted: int
    kept: int
    duplicates: int = 0  # standard-queue chaos: extra deliveries, never deleted themselves


class SqsEventSource:
    """``pollers`` threads (one per pool process, like Lambda's concurrency) feeding ``pool``."""

    def __init__(
        self,
        sqs: Any,
        pool: FunctionPool,
        config: EsmConfig,
        *,
        pollers: int | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
        chaos: StandardQueueChaos | None = None,
    ) -> None:
        self._sqs = sqs
        self._pool = pool
        self.config = config
        self._pollers = pollers or pool.size
        self._on_batch = on_batch
        # Rate 0 (the default) delivers in receive order; set_rate() turns standard-queue delivery on or off.
        self.chaos = chaos or StandardQueueChaos()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._log = get_logger(component="esm", function=pool.function)
        self.batches = 0

    def start(self) -> SqsEventSource:
        for i in range(self._pollers):
            t = threading.Thread(target=self._run, name=f"esm-{self._pool.function}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = POLL_WAIT_SECONDS + 5) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------ polling

    def _receive(self, count: int, wait: int) -> list[dict[str, Any]]:
        resp = self._sqs.receive_message(
            QueueUrl=self.config.queue_url,
            MaxNumberOfMessages=max(1, min(MAX_RECEIVE, count)),
            WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(resp.get("Messages") or [])

    def gather(self, wait: int = POLL_WAIT_SECONDS, room: int | None = None) -> list[dict[str, Any]]:
        """One batch: a long poll, then more messages until the batch (or ``room``) is full or the window closes."""
        size = self.config.batch_size if room is None else room
        messages = self._receive(size, wait)
        if not messages:
            return []
        window_end = time.monotonic() + self.config.batching_window
        while len(messages) < size and not self._stop.is_set():
            left = window_end - time.monotonic()
            if left <= 0:
                break
            more = self._receive(size - len(messages), 0)
            if more:
                messages.extend(more)
            else:
                self._stop.wait(min(0.05, left))
        return messages

    def _run(self) -> None:
        while not self._stop.is_set():
            # Messages the standard-queue chaos holds for a later batch take room in the next one.
            room = self.config.batch_size - self.chaos.pending()
            try:
                messages = self.gather(room=room) if room > 0 else []
            except Exception as exc:  # the emulator going away at shutdown, or a hiccup
                if self._stop.is_set():
                    return
                self._log.warning("esm.receive_failed", error=str(exc))
                self._stop.wait(1.0)
                continue
            messages = self.chaos.arrange(messages, self.config.batch_size)
            if not messages:
                continue
            try:
                self.deliver(messages)
            except PoolClosed:
                return
            except Exception as exc:
                self._log.error("esm.deliver_failed", error=str(exc))

    def deliver(self, messages: list[dict[str, Any]]) -> BatchOutcome:
        event = sqs_event(messages, self.config.queue_arn, self.config.region)
        inv = self._pool.invoke(event)
        ids = [m["MessageId"] for m in messages]
        keep: set[str] | None
        if inv.outcome != "ok":
            keep = None
        elif self.config.report_batch_item_failures:
            keep = batch_failures(inv.result, ids)
        else:
            keep = set()
        done = [m for m in messages if keep is not None and m["MessageId"] not in keep and not is_duplicate(m)]
        deleted = self._delete(done)
        self.batches += 1
        dups = sum(1 for m in messages if is_duplicate(m))
        kept = len(messages) - dups - deleted
        outcome = BatchOutcome(invocation=inv, received=len(messages), deleted=deleted, kept=kept, duplicates=dups)
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    def _delete(self, messages: list[dict[str, Any]]) -> int:
        deleted = 0
        for i in range(0, len(messages), MAX_RECEIVE):
            chunk = messages[i : i + MAX_RECEIVE]
            resp = self._sqs.delete_message_batch(
                QueueUrl=self.config.queue_url,
                Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(chunk)],
            )
            deleted += len(resp.get("Successful") or [])
            for failed in resp.get("Failed") or []:
                # A receipt that expired during a long invocation: the message comes back, as on AWS.
                self._log.warning("esm.delete_failed", code=failed.get("Code"), message=failed.get("Message"))
        return deleted
