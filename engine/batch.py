"""SQS batches: partial batch responses and a visibility heartbeat."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from engine.error_report import error_info
from engine.errors import MalformedMessage
from engine.log import get_logger
from engine.messages import DELAY_ATTRIBUTE, StepMessage
from engine.outcome import OutcomeStatus
from engine.ports import Queue
from engine.runtime import Engine, Remaining
from engine.verdicts import RecordVerdict, check_record, requeued


class Heartbeat:
    """Keeps extending the visibility of the batch's unfinished messages.

    Without it a step longer than the queue's visibility timeout is delivered to
    a second worker while the first still runs it. With ``beat_first`` the first beat is at
    the batch's start: the extension is then shorter than the queue's own visibility timeout
    (which Lambda requires to be at least the function's timeout), and a dead worker's
    messages come back ``extend_to`` seconds after its last beat instead of after the queue's
    timeout (DESIGN.md, "Recovery in seconds").
    """

    def __init__(
        self,
        queue: Queue,
        receipts: Mapping[str, str],
        *,
        interval: float,
        extend_to: int,
        on_beat: Callable[[str], None] | None = None,
        beat_first: bool = False,
    ) -> None:
        self._queue = queue
        self._beat_first = beat_first
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
            # No timeout: an extension still running after the handler returned would act on
            # messages SQS is deleting. Each call is bounded by the queue client's own timeouts.
            self._thread.join()

    def done(self, message_id: str) -> None:
        """Stop extending ``message_id``; waits out an extension in progress, so that once this
        returns the heartbeat never touches the message again."""
        with self._lock:
            self._pending.pop(message_id, None)

    def _run(self) -> None:
        if self._beat_first:
            self._beat()
        while not self._stop.wait(self._interval):
            self._beat()

    def _beat(self) -> None:
        # One batch call a beat (SQS takes ten; a batch has ten records at most), made under
        # the lock: ``done`` cannot slip in between the snapshot and the extension.
        log = get_logger(execution_id=None, step=None, attempt=None)
        with self._lock:
            pending = dict(self._pending)
            if self._stop.is_set() or not pending:
                return
            try:
                failed = set(self._queue.change_visibility_many(list(pending.values()), self._extend_to))
            except Exception as exc:  # a lost receipt is not worth killing the step for
                log.warning("heartbeat.failed", messages=len(pending), error=error_info(exc))
                return
            if failed:
                log.warning("heartbeat.not_extended", messages=len(failed))
            extended = [message_id for message_id, receipt in pending.items() if receipt not in failed]
            self.beats += len(extended)
        if self._on_beat is not None:
            for message_id in extended:
                self._on_beat(message_id)


def process_batch(
    engine: Engine,
    event: Mapping[str, Any],
    *,
    remaining: Remaining | None = None,
    heartbeat_interval: float = 0.0,
    visibility_timeout: int = 30,
    beat_first: bool = False,
) -> dict[str, list[dict[str, str]]]:
    """Handle an SQS event; answer with the messages SQS should deliver again.

    Stale and duplicate messages are successes (they are deleted); only failures
    worth retrying are reported, so one bad message does not redeliver the batch.
    Once the invocation's time is nearly spent (``verdicts.check_record``) the rest of
    the batch is handed to other invocations (``hand_over``) instead of started.
    """
    records = list(event.get("Records") or [])
    failures: list[dict[str, str]] = []
    held: list[tuple[str, StepMessage]] = []
    pace = _Pace(remaining)
    receipts = {r.get("messageId", str(i)): r.get("receiptHandle", "") for i, r in enumerate(records)}
    with Heartbeat(
        engine.queue, receipts, interval=heartbeat_interval, extend_to=visibility_timeout, beat_first=beat_first
    ) as heartbeat:
        for i, record in enumerate(records):
            message_id = record.get("messageId", str(i))
            log = get_logger(execution_id=None, step=None, attempt=None, message_id=message_id)
            try:
                try:
                    message = StepMessage.decode(record.get("body", ""))
                except MalformedMessage as exc:
                    log.error("message.malformed", error=error_info(exc))
                    # A failed send raises: the record is reported, so SQS delivers it again
                    # (and parks it raw after maxReceiveCount) instead of it being acknowledged.
                    engine.dead_letter_raw(str(record.get("body", "")), exc, message_id)
                    continue
                attributes = record.get("attributes") or {}
                redelivered = int(attributes.get("ApproximateReceiveCount", "1") or 1) > 1
                if held or pace.verdict(engine, first=i == 0) is RecordVerdict.HOLD_BACK:
                    held.append((message_id, requeued(message, redelivered=redelivered)))
                    continue
                with pace.timing():
                    outcome = engine.handle(
                        message, redelivered=redelivered, remaining=remaining, queue_wait=queue_wait(record)
                    )
                if outcome.status is OutcomeStatus.NO_TIME and i > 0:
                    held.append((message_id, requeued(message, redelivered=redelivered)))
                elif outcome.status is OutcomeStatus.NO_TIME:
                    hand_back(engine, heartbeat, message_id, str(record.get("receiptHandle", "")))
                    failures.append({"itemIdentifier": message_id})
            except Exception as exc:
                log.exception("message.failed", error=error_info(exc))
                failures.append({"itemIdentifier": message_id})
            finally:
                heartbeat.done(message_id)
    failures += hand_over(engine, held)
    return {"batchItemFailures": failures}


def queue_wait(record: Mapping[str, Any]) -> float:
    """Seconds the record's message waited in the queue before its first receive, less the
    delay it was sent with (``DELAY_ATTRIBUTE``): SQS's own two timestamps, both in the
    Lambda event. 0 when either is missing or the clocks disagree; a redelivery counts its
    first receive, so the visibility timeouts since are not counted as queueing.
    """
    attributes = record.get("attributes") or {}
    try:
        sent = int(attributes["SentTimestamp"])
        first = int(attributes["ApproximateFirstReceiveTimestamp"])
        held = (record.get("messageAttributes") or {}).get(DELAY_ATTRIBUTE) or {}
        delay = float(held.get("stringValue") or 0)
    except (KeyError, TypeError, ValueError):
        return 0.0
    waited = (first - sent) / 1000.0 - delay
    return waited if 0.0 < waited < float("inf") else 0.0


class _Pace:
    """The invocation's time as the batch spends it: what it had at the start, and the
    longest record so far, both read from ``remaining`` (the deadline's clock)."""

    def __init__(self, remaining: Remaining | None) -> None:
        self._remaining = remaining
        self.budget = None if remaining is None else remaining()
        self.slowest = 0.0

    def verdict(self, engine: Engine, *, first: bool) -> RecordVerdict:
        left = None if self._remaining is None else self._remaining()
        return check_record(left, first=first, budget=self.budget, slowest=self.slowest, cfg=engine.config)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        before = None if self._remaining is None else self._remaining()
        try:
            yield
        finally:
            if self._remaining is not None and before is not None:
                self.slowest = max(self.slowest, before - self._remaining())


def hand_over(engine: Engine, held: list[tuple[str, StepMessage]]) -> list[dict[str, str]]:
    """Records held back for lack of time: a fresh copy of each goes to the queue and the
    record is acknowledged; the failures to report when the copies could not be sent.

    Reporting the record instead would bring it back with one more receive, and under a
    long overload SQS would park it in the DLQ after ``maxReceiveCount`` hand-backs:
    overload must cost a delay, not a dead letter. A copy sent whose original then comes
    back anyway (the invocation died before answering) is a duplicate, which the runner
    tells apart as any other.
    """
    if not held:
        return []
    log = get_logger(execution_id=None, step=None, attempt=None)
    try:
        engine.queue.send_many([message for _, message in held])
    except Exception as exc:  # reported: SQS delivers them again after the visibility timeout
        log.warning("batch.hand_over_failed", error=error_info(exc), records=len(held))
        return [{"itemIdentifier": message_id} for message_id, _ in held]
    log.info("batch.handed_over", records=len(held))
    return []


def hand_back(engine: Engine, heartbeat: Heartbeat, message_id: str, receipt: str) -> None:
    """A first record whose step was not started for lack of time: visible again now (not
    after the visibility timeout), so that an invocation with time takes it; the caller
    reports it, so that a step that can never fit is parked after ``maxReceiveCount``."""
    log = get_logger(execution_id=None, step=None, attempt=None, message_id=message_id)
    # It had the whole invocation: its timeout plus the reserve exceeds the worker's timeout.
    log.error("message.no_time_at_invocation_start")
    heartbeat.done(message_id)  # the heartbeat must not hide it again
    try:
        engine.queue.change_visibility(receipt, 0)
    except Exception as exc:  # it still comes back, after the visibility timeout
        log.warning("message.release_failed", error=error_info(exc))
