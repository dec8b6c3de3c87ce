"""Test doubles and a queue driver for the engine's integration tests.

The store and queue are the real adapters on moto; the wrappers here only watch
them (and inject failures where a test asks), so every test also checks the
protocol's invariants on every write.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engine.adapters.dynamodb import DynamoStore
from engine.batch import process_batch
from engine.clock import FakeClock
from engine.config import EngineConfig
from engine.errors import TransientError
from engine.messages import StepMessage
from engine.runtime import Engine
from engine.state import Execution, Status
from loom.testing.queue import sqs_timing


class Crash(BaseException):
    """A simulated worker death. Not an ``Exception``: nothing in the engine may catch it."""


class CrashAt:
    """The engine's ``Faults`` port: raise ``Crash`` at an armed point (optionally for one step)."""

    def __init__(self) -> None:
        self._armed: list[tuple[str, int | None, int]] = []  # (point, step or None, times; -1 = always)
        self.fired: list[tuple[str, dict[str, Any]]] = []

    def arm(self, point: str, *, step: int | None = None, times: int = 1) -> None:
        self._armed.append((point, step, times))

    def disarm(self) -> None:
        self._armed.clear()

    def point(self, name: str, **info: Any) -> None:
        for i, (point, step, times) in enumerate(self._armed):
            if point == name and (step is None or info.get("step") == step) and times != 0:
                self._armed[i] = (point, step, times - 1 if times > 0 else times)
                self.fired.append((name, info))
                raise Crash(name)


class WatchedStore:
    """Delegates to a real store; checks version discipline on every successful write.

    ``crash_after_commit`` kills the worker right after a step's history commit,
    before the execution item moves (the window the history commit point covers).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written: dict[str, list[int]] = defaultdict(list)  # execution id -> versions written
        self.last: dict[str, Execution] = {}
        self.calls: Counter[str] = Counter()
        self.commits: Counter[tuple[str, int]] = Counter()
        self.crash_after_commit = 0
        self.fail_get: Callable[[str], bool] | None = None
        self.fail_put: Callable[[Execution], bool] | None = None
        self.before_get: Callable[[str], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _count(self, name: str) -> None:
        self.calls[name] += 1

    def create_execution(self, execution: Execution) -> None:
        self._count("create_execution")
        self.inner.create_execution(execution)
        assert execution.version == 1, execution
        self.written[execution.id].append(1)
        self.last[execution.id] = execution

    def get_execution(self, execution_id: str) -> Execution | None:
        self._count("get_execution")
        if self.fail_get is not None and self.fail_get(execution_id):
            raise TransientError("injected: table throttled")
        if self.before_get is not None:
            hook, self.before_get = self.before_get, None
            hook(execution_id)
        return self.inner.get_execution(execution_id)

    def put_execution(self, execution: Execution, *, expected_version: int, expected_step: int) -> None:
        self._count("put_execution")
        if self.fail_put is not None and self.fail_put(execution):
            raise TransientError("injected: table throttled")
        self.inner.put_execution(execution, expected_version=expected_version, expected_step=expected_step)
        assert execution.version == expected_version + 1, (execution.version, expected_version)
        previous = self.last.get(execution.id)
        if previous is not None:
            assert previous.version == expected_version, "a write succeeded from a version that was not current"
            if previous.terminal and execution.status is not previous.status:
                # Only redrive_failed may leave FAILED; tests that use it check that themselves.
                assert previous.status.value == "FAILED" and execution.status.value == "RUNNING", (
                    previous.status,
                    execution.status,
                )
        if execution.status.value in ("RUNNING", "SLEEPING"):
            assert execution.next_wake_at is not None, f"{execution.status} execution written without a wake time"
        self.written[execution.id].append(execution.version)
        self.last[execution.id] = execution

    def commit_step(self, execution_id: str, index: int, name: str, attempt: Any, result: Any) -> None:
        self._count("commit_step")
        self.inner.commit_step(execution_id, index, name, attempt, result)
        # A compensation's or a catch handler's commit is its own (``<name>#compensate``, ``<name>#catch``).
        self.commits[(execution_id, index) if "#" not in name else (execution_id, index, name)] += 1
        if self.crash_after_commit:
            self.crash_after_commit -= 1
            raise Crash("after_commit")

    def record_failure(self, *args: Any, **kwargs: Any) -> bool:
        self._count("record_failure")
        return self.inner.record_failure(*args, **kwargs)

    def get_step(self, *args: Any, **kwargs: Any) -> Any:
        self._count("get_step")
        return self.inner.get_step(*args, **kwargs)

    def due(self, *args: Any, **kwargs: Any) -> Any:
        self._count("due")
        return self.inner.due(*args, **kwargs)

    def assert_versions_contiguous(self) -> None:
        for execution_id, versions in self.written.items():
            assert versions == list(range(1, len(versions) + 1)), (execution_id, versions)


@dataclass
class Sent:
    message: StepMessage
    delay: int
    at: float


class SpyQueue:
    """Delegates to the real SQS adapter, recording what the engine asked for.

    Delays go to moto as 0 (moto's delays run on the wall clock) and are kept
    here, so the driver can honour them on the fake clock instead.
    """

    def __init__(self, inner: Any, clock: FakeClock) -> None:
        self.inner = inner
        self.clock = clock
        self.sent: list[Sent] = []
        self.dead_letters: list[dict[str, Any]] = []
        self.visibility_changes: list[tuple[str, int]] = []
        self.visibility_calls = 0  # ChangeMessageVisibility(Batch) requests made
        self.fail_sends = 0
        self.on_change_visibility: Callable[[str, int], None] | None = None
        self.visible_at: dict[str, float] = {}
        # When (on the fake clock) each body was last sent, and its delay: SQS's timestamps.
        self.sent_at: dict[str, tuple[float, int]] = {}
        # What backlog() answers instead of SQS's figure (which is approximate, and may lag).
        self.backlog_says: int | None = None
        self.backlog_asked = 0
        # What parked() answers instead of the dead-letter queue's own count.
        self.parked_says: int | Exception | None = None

    def send(self, message: StepMessage, delay_seconds: int = 0) -> None:
        if self.fail_sends:
            self.fail_sends -= 1
            raise TransientError("injected: queue unavailable")
        self.inner.send(message, 0)
        self.sent.append(Sent(message, delay_seconds, self.clock.now()))
        self.visible_at[message.encode()] = self.clock.now() + delay_seconds
        self.sent_at[message.encode()] = (self.clock.now(), delay_seconds)

    def send_many(self, messages: list[StepMessage]) -> None:
        if self.fail_sends:
            self.fail_sends -= 1
            raise TransientError("injected: queue unavailable")
        self.inner.send_many(messages)
        for m in messages:
            self.sent.append(Sent(m, 0, self.clock.now()))
            self.visible_at[m.encode()] = self.clock.now()
            self.sent_at[m.encode()] = (self.clock.now(), 0)

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        self.inner.send_dead_letter(body)
        self.dead_letters.append(body)

    def backlog(self) -> int:
        self.backlog_asked += 1
        return self.inner.backlog() if self.backlog_says is None else self.backlog_says

    def parked(self) -> int:
        if isinstance(self.parked_says, Exception):
            raise self.parked_says
        return self.inner.parked() if self.parked_says is None else self.parked_says

    def change_visibility_many(self, receipt_handles: Sequence[str], timeout_seconds: int) -> list[str]:
        failed = self.inner.change_visibility_many(receipt_handles, timeout_seconds)
        self.visibility_calls += 1
        for receipt in receipt_handles:
            if receipt not in failed:
                self.visibility_changes.append((receipt, timeout_seconds))
                if self.on_change_visibility is not None:
                    self.on_change_visibility(receipt, timeout_seconds)
        return list(failed)

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None:
        self.inner.change_visibility(receipt_handle, timeout_seconds)
        self.visibility_calls += 1
        self.visibility_changes.append((receipt_handle, timeout_seconds))
        if self.on_change_visibility is not None:
            self.on_change_visibility(receipt_handle, timeout_seconds)


def sqs_record(message: dict[str, Any], queue_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    """The record shape Lambda's SQS event source delivers, built from a ReceiveMessage answer."""
    attributes = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
            "SentTimestamp": attributes.get("SentTimestamp", "0"),
            "SenderId": attributes.get("SenderId", "AIDATEST"),
            "ApproximateFirstReceiveTimestamp": attributes.get("ApproximateFirstReceiveTimestamp", "0"),
        },
        "messageAttributes": {},
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


@dataclass
class Driver:
    """Plays Lambda's SQS event source against moto: receive, invoke, delete or release."""

    engine: Engine
    aws: dict[str, Any]
    clock: FakeClock
    remaining: Callable[[], float] | None = None
    # A dead worker's messages come back when the visibility timeout runs out (template: 360 s),
    # which is longer than a lease: by then a started attempt counts as lost.
    crash_visibility: float = 360.0
    crashes: list[str] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    first_received: dict[str, float] = field(default_factory=dict)  # message id -> fake-clock time

    @property
    def queue_url(self) -> str:
        return self.aws["StepQueue"]

    def receive(self, n: int = 10) -> list[dict[str, Any]]:
        answer = self.aws["sqs"].receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=n,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
        )
        return answer.get("Messages", [])

    def release(self, message: dict[str, Any]) -> None:
        """What a visibility timeout running out does: the message is visible again."""
        self.aws["sqs"].change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )

    def delete(self, message: dict[str, Any]) -> None:
        self.aws["sqs"].delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def deliver(self, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Invoke the worker with these messages as one batch; None if the worker died."""
        spy = self.engine.queue
        if isinstance(spy, SpyQueue):
            # Honour SQS DelaySeconds on the fake clock: the batch arrives when its last message is due.
            due = max((spy.visible_at.get(m["Body"], 0.0) for m in messages), default=0.0)
            if due > self.clock.now():
                self.clock.set(due)
        event = {"Records": [self._record(m) for m in messages]}
        try:
            response = process_batch(self.engine, event, remaining=self.remaining)
        except Crash as crash:
            self.crashes.append(str(crash))
            for m in messages:
                self.release(m)
            self.clock.advance(self.crash_visibility)
            return None
        self.responses.append(response)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for m in messages:
            (self.release if m["MessageId"] in failed else self.delete)(m)
        return response

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        """The record, with SQS's send and first-receive times on the fake clock (moto's run on
        the wall clock, which a test's jumps do not move): the queue's wait the engine reads."""
        record = sqs_record(message, self.aws["StepQueue.Arn"])
        spy = self.engine.queue
        sent = spy.sent_at.get(message["Body"]) if isinstance(spy, SpyQueue) else None
        if sent is None:
            return record
        at, delay = sent
        first = self.first_received.setdefault(message["MessageId"], self.clock.now())
        stamps, record["messageAttributes"] = sqs_timing(at, first, delay)
        record["attributes"].update(stamps)
        return record

    def pump(self, *, max_batches: int = 200, batch_size: int = 1) -> int:
        """Deliver until the queue is empty; returns how many batches ran."""
        for n in range(max_batches):
            messages = self.receive(batch_size)
            if not messages:
                return n
            self.deliver(messages)
        raise AssertionError(f"queue not empty after {max_batches} batches")

    def backlog(self) -> int:
        """Messages in the queue, visible or not (peeking by receiving would bump receive counts)."""
        attrs = self.aws["sqs"].get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


@dataclass
class Rig:
    engine: Engine
    store: WatchedStore
    queue: SpyQueue
    faults: CrashAt
    driver: Driver
    clock: FakeClock
    aws: dict[str, Any]

    def status(self, execution_id: str) -> str:
        return self.engine.get(execution_id).status.value


def build_rig(
    aws: dict[str, Any],
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    registry: Any,
    *,
    config: EngineConfig | None = None,
    seed: int = 7,
) -> Rig:
    plain = make_engine(registry=registry, config=config)
    store = WatchedStore(plain.store)
    queue = SpyQueue(plain.queue, clock)
    faults = CrashAt()
    engine = make_engine(
        registry=registry, config=config, store=store, queue=queue, faults=faults, rng=random.Random(seed)
    )
    return Rig(engine, store, queue, faults, Driver(engine, aws, clock), clock, aws)


def dead_letters(aws: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    while True:
        answer = aws["sqs"].receive_message(QueueUrl=aws["DeadLetterQueue"], MaxNumberOfMessages=10, WaitTimeSeconds=0)
        batch = answer.get("Messages", [])
        if not batch:
            return out
        for m in batch:
            out.append(json.loads(m["Body"]))
            aws["sqs"].delete_message(QueueUrl=aws["DeadLetterQueue"], ReceiptHandle=m["ReceiptHandle"])


class Recorder:
    """Builds step functions that log every run and can be told to misbehave per run."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, int]] = []  # (execution id, step index, attempt)

    def step(self, name: str, behave: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        def fn(ctx: Any) -> Any:
            self.runs.append((ctx.execution_id, ctx.step_index, ctx.attempt))
            if behave is not None:
                out = behave(ctx)
                if out is not None:
                    return out
            return {name: f"{name}@{ctx.attempt}"}

        fn.__name__ = name
        return fn

    def count(self, execution_id: str, index: int | None = None) -> int:
        return sum(1 for e, i, _ in self.runs if e == execution_id and (index is None or i == index))


def add_workflow(registry: Any, name: str, steps: list[Any], retry: Any = None) -> Any:
    from engine import workflow

    attrs: dict[str, Any] = {"steps": steps}
    if retry is not None:
        attrs["retry"] = retry
    return workflow(name, registry=registry)(type(name.title(), (), attrs))


class WriteKind(StrEnum):
    """The engine's conditional writes, told apart by what they write."""

    START = "start"  # create_execution
    START_MARK = "start_mark"  # a guarded run marks its attempt started
    COMMIT = "commit"  # the history commit of a step's result
    FAILURE = "failure"  # a failed attempt appended to the history
    ADVANCE = "advance"  # the execution moves past a committed step
    RETRY = "retry"  # the execution moves to the next attempt
    FAIL = "fail"  # the execution becomes FAILED
    CANCEL = "cancel"
    CLAIM = "claim"  # the sweeper (or redrive_failed) takes a lapsed execution over


def write_kind(operation: str, body: dict[str, Any]) -> WriteKind | None:
    """Which engine write a PutItem/UpdateItem request is (None: not one of the engine's)."""
    if not body["Key" if operation == "UpdateItem" else "Item"]["SK"]["S"].startswith(("STEP#", "#META")):
        return None  # the examples' ledger
    if operation == "UpdateItem":
        return WriteKind.FAILURE if ":status" in body["ExpressionAttributeValues"] else WriteKind.COMMIT
    if body["ConditionExpression"].startswith("attribute_not_exists(PK)"):
        return WriteKind.START
    new = DynamoStore._execution(body["Item"])
    if new.status is Status.CANCELLED:
        return WriteKind.CANCEL
    if new.status is Status.FAILED:
        return WriteKind.FAIL
    if new.current_step > int(body["ExpressionAttributeValues"][":s"]["N"]) or new.terminal:
        return WriteKind.ADVANCE
    if new.started_attempt and new.attempt_started_at == new.updated_at:
        return WriteKind.START_MARK
    if new.ready_at is not None and new.ready_at > new.updated_at:
        return WriteKind.RETRY
    return WriteKind.CLAIM


class LostAnswers:
    """DynamoDB applies an armed write, then its answer is lost (a timeout, a 500).

    A ``needs-retry`` handler on the client asks botocore to retry after the real
    request has been applied, so botocore sends the very same request again: what
    its standard retry does when an answer never arrives.
    """

    def __init__(self, client: Any) -> None:
        self._armed: list[WriteKind] = []
        self.lost: list[WriteKind] = []
        for operation in ("PutItem", "UpdateItem"):
            client.meta.events.register(f"needs-retry.dynamodb.{operation}", self._needs_retry)

    def arm(self, kind: WriteKind) -> None:
        """Lose the answer of the next write of this kind."""
        self._armed.append(kind)

    def disarm(self) -> None:
        self._armed.clear()

    def _needs_retry(self, response: Any = None, operation: Any = None, request_dict: Any = None, **_: Any) -> Any:
        if not self._armed or response is None or response[0].status_code != 200:
            return None  # not applied, or nothing armed: botocore's own handler decides
        kind = write_kind(operation.name, json.loads(request_dict["body"]))
        if kind not in self._armed:
            return None
        self._armed.remove(kind)
        self.lost.append(kind)
        return 0  # seconds to wait before botocore sends it again
