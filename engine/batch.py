"""SQS batches: partial batch responses and a visibility heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from engine.error_report import error_info
from engine.errors import MalformedMessage
from engine.log import get_logger
from engine.messages import StepMessage
from engine.ports import Queue
from engine.runtime import Engine, Remaining


class Heartbeat:
    """Keeps extending the visibility of the batch's unfinished messages.

    Without it a step longer than the queue's visibility timeout is delivered to
    a second worker while the first still runs it.
    """

    def __init__(
        self,
        queue: Queue,
        receipts: Mapping[str, str],
        *,
        interval: float,
        extend_to: int,
        on_beat: Callable[[str], None] | None = None,
    ) -> None:
        self._queue = queue
        self._pending = dict(receipts)  # message id -> receipt handle
        self._interval = interval
        self._extend_to = extend_to
        self._on_beat = on_beat
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="loom-heartbeat", daemon=True)
        self.beats = 0

    def __enter__(self) -> Heartbeat:
        if self._interval > 0 and self._pending:
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._interval + 5)

    def done(self, message_id: str) -> None:
        with self._lock:
            self._pending.pop(message_id, None)

    def _run(self) -> None:
        log = get_logger(execution_id=None, step=None, attempt=None)
        while not self._stop.wait(self._interval):
            with self._lock:
                pending = list(self._pending.items())
            for message_id, receipt in pending:
                try:
                    self._queue.change_visibility(receipt, self._extend_to)
                    self.beats += 1
                    if self._on_beat is not None:
                        self._on_beat(message_id)
                except Exception as exc:  # a lost receipt is not worth killing the step for
                    log.warning("heartbeat.failed", message_id=message_id, error=error_info(exc))


def process_batch(
    engine: Engine,
    event: Mapping[str, Any],
    *,
    remaining: Remaining | None = None,
    heartbeat_interval: float = 0.0,
    visibility_timeout: int = 30,
) -> dict[str, list[dict[str, str]]]:
    """Handle an SQS event; answer with the messages SQS should deliver again.

    Stale and duplicate messages are successes (they are deleted); only failures
    worth retrying are reported, so one bad message does not redeliver the batch.
    """
    records = list(event.get("Records") or [])
    failures: list[dict[str, str]] = []
    receipts = {r.get("messageId", str(i)): r.get("receiptHandle", "") for i, r in enumerate(records)}
    with Heartbeat(engine.queue, receipts, interval=heartbeat_interval, extend_to=visibility_timeout) as heartbeat:
        for i, record in enumerate(records):
            message_id = record.get("messageId", str(i))
            log = get_logger(execution_id=None, step=None, attempt=None, message_id=message_id)
            try:
                try:
                    message = StepMessage.decode(record.get("body", ""))
                except MalformedMessage as exc:
                    log.error("message.malformed", error=error_info(exc))
                    engine.dead_letter_raw(str(record.get("body", "")), exc, message_id)
                    continue
                attributes = record.get("attributes") or {}
                redelivered = int(attributes.get("ApproximateReceiveCount", "1") or 1) > 1
                engine.handle(message, redelivered=redelivered, remaining=remaining)
            except Exception as exc:
                log.exception("message.failed", error=error_info(exc))
                failures.append({"itemIdentifier": message_id})
            finally:
                heartbeat.done(message_id)
    return {"batchItemFailures": failures}
