"""A step starts only when the invocation has its declared timeout plus the reserve left.

Lambda's deadline is played on the fake clock: ``Invocation`` answers ``remaining`` from
it, and a step that runs past the deadline is killed the way Lambda kills it (``Crash``).
"""

from __future__ import annotations

import pytest

from engine import FakeClock, Registry, RetryPolicy, StepMessage, process_batch, step
from tests.integration.engine_support import Crash, add_workflow, sqs_record

pytestmark = pytest.mark.integration

WORKER_TIMEOUT = 60.0


class Invocation:
    """Lambda's ``get_remaining_time_in_millis``, on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.deadline = clock.now() + WORKER_TIMEOUT

    def begin(self) -> None:
        self.deadline = self.clock.now() + WORKER_TIMEOUT

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


def test_a_batch_record_without_time_for_its_step_is_reported_and_not_started(rig, rec, invocation, aws):
    for i in range(3):
        rig.engine.start("one", {}, execution_id=f"b{i}")
    messages = rig.driver.receive(10)
    assert len(messages) == 3
    invocation.begin()
    event = {"Records": [sqs_record(m, aws["StepQueue.Arn"]) for m in messages]}
    # 60 s: the first two 20 s steps start with 60 and 40 s left; the third would have 20.
    response = process_batch(rig.engine, event, remaining=invocation.remaining)
    third = messages[2]
    assert response == {"batchItemFailures": [{"itemIdentifier": third["MessageId"]}]}
    late = next(f"b{i}" for i in range(3) if rec.count(f"b{i}") == 0)
    assert [rig.status(f"b{i}") for i in range(3)].count("COMPLETED") == 2
    assert rig.store.written[late] == [1], "the deferred record wrote nothing (no at_most_once start mark)"
    # It was made visible again at once, not after the visibility timeout.
    for m in messages[:2]:
        rig.driver.delete(m)
    invocation.begin()
    assert rig.driver.pump() == 1
    assert rig.status(late) == "COMPLETED" and rec.count(late) == 1 and rig.driver.crashes == []


def test_no_lambda_deadline_holds_no_step_back(rig, rec, invocation):
    invocation.deadline = float("inf")  # no Lambda: nothing kills a step, and remaining is None
    rig.engine.start("tight", {}, execution_id="nodeadline")
    rig.driver.pump()
    assert rig.status("nodeadline") == "COMPLETED" and rec.count("nodeadline") == 2
