"""The visibility heartbeat: a step longer than the visibility timeout keeps its message hidden."""

from __future__ import annotations

import threading

import pytest

from engine import Registry
from engine.batch import Heartbeat, process_batch
from tests.integration.engine_support import add_workflow, build_rig, sqs_record

pytestmark = pytest.mark.integration


def test_heartbeat_extends_visibility_while_a_long_step_runs(aws, make_engine, clock):
    beat = threading.Event()
    reg = Registry()

    def long_step(ctx):
        # The step lasts until the heartbeat has extended the message at least once.
        assert beat.wait(timeout=10), "no heartbeat while the step ran"
        return {"long": "done"}

    add_workflow(reg, "long", [long_step])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.queue.on_change_visibility = lambda receipt, timeout: beat.set()
    rig.engine.start("long", {}, execution_id="long")
    # Received with no visibility at all: without a heartbeat anyone could take it meanwhile.
    (message,) = aws["sqs"].receive_message(
        QueueUrl=aws["StepQueue"], VisibilityTimeout=0, MessageSystemAttributeNames=["All"]
    )["Messages"]
    event = {"Records": [sqs_record(message, aws["StepQueue.Arn"])]}
    response = process_batch(rig.engine, event, heartbeat_interval=0.02, visibility_timeout=77)
    assert response == {"batchItemFailures": []}
    assert rig.engine.get("long").status.value == "COMPLETED"
    assert rig.queue.visibility_changes and set(rig.queue.visibility_changes) == {(message["ReceiptHandle"], 77)}
    # The extension took effect in SQS: the message is hidden, not back in the queue.
    assert aws["sqs"].receive_message(QueueUrl=aws["StepQueue"], WaitTimeSeconds=0).get("Messages") is None


def test_heartbeat_stops_extending_finished_messages(aws, make_engine, clock):
    rig = build_rig(aws, make_engine, clock, Registry())
    for body in ("a", "b"):
        aws["sqs"].send_message(QueueUrl=aws["StepQueue"], MessageBody=body)
    received = aws["sqs"].receive_message(QueueUrl=aws["StepQueue"], MaxNumberOfMessages=10)["Messages"]
    receipts = {m["Body"]: m["ReceiptHandle"] for m in received}
    assert set(receipts) == {"a", "b"}
    second_beat = threading.Event()
    seen: list[str] = []

    def on_beat(message_id: str) -> None:
        seen.append(message_id)
        if seen.count("b") >= 2:
            second_beat.set()

    hb = Heartbeat(rig.queue, receipts, interval=0.01, extend_to=30, on_beat=on_beat)
    hb.done("a")  # finished before the first beat
    with hb:
        assert second_beat.wait(timeout=10)
    assert "a" not in seen and hb.beats >= 2
    assert {r for r, _ in rig.queue.visibility_changes} == {receipts["b"]}


def test_a_beat_extends_the_whole_batch_in_one_request(aws, make_engine, clock):
    """Ten pending records, one ChangeMessageVisibilityBatch a beat: a heartbeat of a second
    on a batch of ten would otherwise cost ten requests a second while nine records wait."""
    rig = build_rig(aws, make_engine, clock, Registry())
    aws["sqs"].send_message_batch(
        QueueUrl=aws["StepQueue"], Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(10)]
    )
    received = aws["sqs"].receive_message(QueueUrl=aws["StepQueue"], MaxNumberOfMessages=10)["Messages"]
    receipts = {m["MessageId"]: m["ReceiptHandle"] for m in received}
    assert len(receipts) == 10
    beaten = threading.Event()
    hb = Heartbeat(rig.queue, receipts, interval=0.01, extend_to=45, on_beat=lambda _: beaten.set())
    with hb:
        assert beaten.wait(timeout=10)
    calls = rig.queue.visibility_calls
    assert calls >= 1 and hb.beats == 10 * calls, "each request extended all ten"
    assert {r for r, _ in rig.queue.visibility_changes} == set(receipts.values())
    # A receipt SQS refuses (its message already deleted) is reported, the others extended.
    aws["sqs"].delete_message(QueueUrl=aws["StepQueue"], ReceiptHandle=received[0]["ReceiptHandle"])
    failed = rig.queue.inner.change_visibility_many(list(receipts.values()), 45)
    assert failed == [received[0]["ReceiptHandle"]]


def test_no_heartbeat_thread_without_an_interval(aws, make_engine, clock):
    rig = build_rig(aws, make_engine, clock, Registry())
    with Heartbeat(rig.queue, {"a": "r"}, interval=0, extend_to=30) as hb:
        pass
    assert hb.beats == 0 and rig.queue.visibility_changes == []


class SlowVisibility:
    """A queue whose ChangeMessageVisibility for ``slow`` blocks until released; it logs
    ("start" | "end" | "done", message id) in order, receipts being the message ids."""

    def __init__(self, slow: str) -> None:
        self.slow = slow
        self.entered = threading.Event()
        self.release = threading.Event()
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def note(self, what: str, message_id: str) -> None:
        with self._lock:
            self.log.append((what, message_id))

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None:
        self.note("start", receipt_handle)
        if receipt_handle == self.slow:
            self.entered.set()
            assert self.release.wait(timeout=30), "never released"
        self.note("end", receipt_handle)

    def change_visibility_many(self, receipt_handles: list[str], timeout_seconds: int) -> list[str]:
        for receipt in receipt_handles:
            self.change_visibility(receipt, timeout_seconds)
        return []


def test_done_racing_a_beat_is_never_followed_by_an_extension_of_that_message():
    queue = SlowVisibility(slow="a")
    hb = Heartbeat(queue, {"a": "a", "b": "b"}, interval=0.01, extend_to=30)
    with hb:
        assert queue.entered.wait(timeout=10)  # a beat is extending "a"; "b" is next in it
        finishing = threading.Thread(target=lambda: (hb.done("b"), queue.note("done", "b")))
        finishing.start()
        # Give done("b") the time to run first (today it waits for the extension in progress;
        # a heartbeat working from a stale snapshot would let it return at once).
        finishing.join(timeout=0.2)
        queue.release.set()
        finishing.join(timeout=10)
        hb.done("a")
    after = queue.log[queue.log.index(("done", "b")) :]
    assert ("start", "b") not in after and ("end", "b") not in after, queue.log


def test_the_heartbeat_stops_before_the_handler_returns_even_when_an_extension_is_slow():
    queue = SlowVisibility(slow="a")
    # Slower than the old join's interval + 5 s: the exit must wait for it, not leave it running.
    threading.Timer(6.0, queue.release.set).start()
    with Heartbeat(queue, {"a": "a"}, interval=0.01, extend_to=30) as hb:
        assert queue.entered.wait(timeout=10)
    assert queue.log[-1] == ("end", "a"), "an extension was still running after the heartbeat stopped"
    assert not hb._thread.is_alive()


def test_the_worker_extends_visibility_through_a_client_with_short_timeouts(fn):
    from functions import wiring

    fn.use("WorkerFunction")
    queue = wiring.engine().queue
    config = queue._visibility.meta.config
    assert queue._visibility is not queue._sqs
    assert (config.connect_timeout, config.read_timeout, config.retries["total_max_attempts"]) == (2, 3, 2)
