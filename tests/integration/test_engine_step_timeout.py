"""A step starts only when the invocation has its declared timeout plus the reserve left.

Lambda's deadline is played on the fake clock: ``Invocation`` answers ``remaining`` from
it, and a step that runs past the deadline is killed the way Lambda kills it (``Crash``).
"""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, step
from engine.batch import process_batch
from engine.clock import FakeClock
from engine.messages import MessageKind, StepMessage
from tests.integration.engine_support import Crash, add_workflow, sqs_record

pytestmark = pytest.mark.integration

WORKER_TIMEOUT = 60.0


class Invocation:
    """Lambda's ``get_remaining_time_in_millis``, on the fake clock."""

    def __init__(self, clock: FakeClock, timeout: float = WORKER_TIMEOUT) -> None:
        self.clock = clock
        self.timeout = timeout
        self.deadline = clock.now() + timeout

    def begin(self) -> None:
        self.deadline = self.clock.now() + self.timeout

    def remaining(self) -> float:
        return self.deadline - self.clock.now()


@pytest.fixture
def invocation(clock):
    return Invocation(clock)


@pytest.fixture
def reg(rec, clock, invocation):
    def taking(seconds: float):
        def behave(ctx):
            clock.advance(seconds)
            if invocation.remaining() < 0:
                raise Crash("killed by the Lambda timeout")

        return behave

    once = RetryPolicy(max_attempts=1)
    reg = Registry()
    add_workflow(
        reg,
        "tight",
        [
            step(rec.step("long", taking(45)), timeout=50),
            step(rec.step("charge", taking(20)), semantics="at_most_once", timeout=20, retry=once),
        ],
    )
    add_workflow(reg, "one", [step(rec.step("work", taking(20)), semantics="at_most_once", timeout=20, retry=once)])
    # No declared timeout: only the batch's own time check holds these back.
    add_workflow(reg, "busy", [rec.step(f"s{i}", taking(2)) for i in range(3)])
    add_workflow(reg, "quick", [rec.step("only", taking(2))])
    return reg


def test_a_step_is_not_chained_without_its_timeout_left_and_runs_on_the_next_delivery(rig, rec, invocation):
    """The issue's case: a 20 s at_most_once step after a 45 s one, in a 60 s invocation."""
    rig.driver.remaining = invocation.remaining
    rig.engine.start("tight", {}, execution_id="tight")
    invocation.begin()
    (first,) = rig.driver.receive(1)
    assert rig.driver.deliver([first]) == {"batchItemFailures": []}
    assert rec.count("tight", 0) == 1 and rec.count("tight", 1) == 0, "the 20 s step was not started with 15 s left"
    ex = rig.engine.get("tight")
    assert (ex.status.value, ex.current_step, ex.started_attempt) == ("RUNNING", 1, 0), "no start mark was written"
    assert [(s.message, s.delay) for s in rig.queue.sent][-1] == (StepMessage("tight", 1, 1, "step"), 0)
    invocation.begin()  # the next delivery is a fresh invocation with its whole timeout
    assert rig.driver.pump() == 1
    assert rig.driver.crashes == []
    assert rig.status("tight") == "COMPLETED" and rec.count("tight", 1) == 1
    rig.store.assert_versions_contiguous()


def test_a_batch_record_without_time_for_its_step_is_handed_over_and_not_started(rig, rec, invocation, aws):
    for i in range(3):
        rig.engine.start("one", {}, execution_id=f"b{i}")
    messages = rig.driver.receive(10)
    assert len(messages) == 3
    invocation.begin()
    event = {"Records": [sqs_record(m, aws["StepQueue.Arn"]) for m in messages]}
    # 60 s: the first two 20 s steps start with 60 and 40 s left; the third would have 20.
    response = process_batch(rig.engine, event, remaining=invocation.remaining)
    # A copy of the third went to the queue; the record itself is acknowledged, so that
    # handing it over does not count a receive towards maxReceiveCount.
    assert response == {"batchItemFailures": []}
    late = next(f"b{i}" for i in range(3) if rec.count(f"b{i}") == 0)
    assert [rig.status(f"b{i}") for i in range(3)].count("COMPLETED") == 2
    assert rig.store.written[late] == [1], "the deferred record wrote nothing (no at_most_once start mark)"
    assert [(s.message, s.delay) for s in rig.queue.sent][-1] == (StepMessage(late, 0, 1, "step"), 0)
    for m in messages:
        rig.driver.delete(m)
    invocation.begin()
    assert rig.driver.pump() == 1
    assert rig.status(late) == "COMPLETED" and rec.count(late) == 1 and rig.driver.crashes == []


def test_no_lambda_deadline_holds_no_step_back(rig, rec, invocation):
    invocation.deadline = float("inf")  # no Lambda: nothing kills a step, and remaining is None
    rig.engine.start("tight", {}, execution_id="nodeadline")
    rig.driver.pump()
    assert rig.status("nodeadline") == "COMPLETED" and rec.count("nodeadline") == 2


def overloaded(rig, aws, invocation) -> list[int]:
    """Workers that always take ten records, each invocation with 10 s: the receive counts seen."""
    counts: list[int] = []
    for _ in range(100):
        messages = rig.driver.receive(10)
        if not messages:
            return counts
        counts += [int(m["Attributes"]["ApproximateReceiveCount"]) for m in messages]
        invocation.begin()
        rig.driver.deliver(messages)
    raise AssertionError("the queue never drained")


def test_under_overload_every_record_waits_for_an_invocation_with_time_instead_of_timing_out(rig, rec, invocation, aws):
    """Steps with no declared timeout, ten 2 s records a batch, a 10 s worker: the records the
    invocation has no time for are handed over, so no invocation times out, no receive is
    counted twice and nothing reaches the dead-letter queue (overload costs a delay)."""
    invocation.timeout = 10.0  # the step bodies die at this invocation's deadline
    rig.driver.remaining = invocation.remaining
    for i in range(10):
        rig.engine.start("busy", {}, execution_id=f"o{i}")
    counts = overloaded(rig, aws, invocation)
    assert rig.driver.crashes == [], "an invocation started a record it had no time for"
    assert set(counts) == {1}, "a record came back with another receive"
    assert [rig.status(f"o{i}") for i in range(10)] == ["COMPLETED"] * 10
    assert all(rec.count(f"o{i}", k) == 1 for i in range(10) for k in range(3))
    dlq = aws["sqs"].get_queue_attributes(QueueUrl=aws["DeadLetterQueue"], AttributeNames=["All"])["Attributes"]
    assert int(dlq["ApproximateNumberOfMessages"]) == 0


def test_a_redelivered_record_held_back_is_handed_over_as_a_guarded_copy(rig, rec, invocation, aws):
    invocation.timeout = 10.0  # the step bodies die at this invocation's deadline
    for i in range(5):
        rig.engine.start("quick", {}, execution_id=f"q{i}")
    messages = rig.driver.receive(10)
    event = {"Records": [sqs_record(m, aws["StepQueue.Arn"]) for m in messages]}
    for record in event["Records"]:
        record["attributes"]["ApproximateReceiveCount"] = "2"
    invocation.begin()
    assert process_batch(rig.engine, event, remaining=invocation.remaining) == {"batchItemFailures": []}
    # 2 s each with 10 s: three start (10, 8 and 6 s left); 4 s is less than 2.5 + 2.
    ran = [f"q{i}" for i in range(5) if rec.count(f"q{i}") == 1]
    assert len(ran) == 3
    copies = [s.message for s in rig.queue.sent[-2:]]
    assert {m.execution_id for m in copies} == {f"q{i}" for i in range(5)} - set(ran)
    assert all(m.kind is MessageKind.REDRIVE for m in copies), "the copy would run unguarded"


def test_held_back_records_whose_copies_cannot_be_sent_are_reported(rig, rec, invocation, aws):
    invocation.timeout = 10.0  # the step bodies die at this invocation's deadline
    for i in range(5):
        rig.engine.start("quick", {}, execution_id=f"f{i}")
    messages = rig.driver.receive(10)
    event = {"Records": [sqs_record(m, aws["StepQueue.Arn"]) for m in messages]}
    invocation.begin()
    rig.queue.fail_sends = 1  # a one-step workflow sends nothing else: the hand-over's batch fails
    response = process_batch(rig.engine, event, remaining=invocation.remaining)
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [m["MessageId"] for m in messages[3:]]
    assert sum(rec.count(f"f{i}") for i in range(5)) == 3
