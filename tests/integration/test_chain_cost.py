"""What a chain costs in AWS requests, and that skipping the read-back between links keeps the protocol.

A chained link starts from the state its predecessor just wrote (the conditional
put succeeded, so that is exactly what is stored) instead of reading the item
again. These tests count the requests botocore sends and check that a write
landing between two links still wins: the stale link's own conditional write fails.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from engine import Registry, Status
from engine.config import EngineConfig
from engine.state import StepStatus
from tests.integration.engine_support import Recorder, add_workflow, build_rig

pytestmark = pytest.mark.integration

STEPS = 6


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def reg(rec: Recorder) -> Registry:
    reg = Registry()
    add_workflow(reg, "six", [rec.step(f"s{i}") for i in range(STEPS)])
    return reg


@pytest.fixture
def requests(aws: dict[str, Any]) -> Counter[str]:
    """Every DynamoDB and SQS request the test's clients send, by operation."""
    seen: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        seen[event_name.split(".")[-1]] += 1

    for client in (aws["dynamodb"], aws["sqs"]):
        client.meta.events.register("before-call.*.*", count)
    return seen


def test_a_chain_reads_the_execution_once_and_sends_one_message(aws, make_engine, clock, reg, rec, requests):
    rig = build_rig(aws, make_engine, clock, reg)
    rig.driver.remaining = lambda: 60.0
    rig.engine.start("six", {}, execution_id="c1")
    requests.clear()  # what follows is the worker's share
    rig.driver.pump()
    worker = Counter(requests)
    store_calls = Counter(rig.store.calls)

    # One read for the message that started the chain; then one history commit and one
    # conditional put per step; no message sent inside the chain.
    assert store_calls["get_execution"] == 1
    assert store_calls["commit_step"] == STEPS and store_calls["put_execution"] == STEPS
    assert worker["GetItem"] == 1
    assert worker["UpdateItem"] == STEPS and worker["PutItem"] == STEPS
    assert worker["SendMessage"] == 0 and worker["SendMessageBatch"] == 0
    assert [s.message.kind for s in rig.queue.sent] == ["step"]  # the start's message only

    ex = rig.engine.get("c1")
    assert ex.status is Status.COMPLETED and ex.current_step == STEPS
    assert ex.context == {f"s{i}": f"s{i}@1" for i in range(STEPS)}
    assert rec.count("c1") == STEPS
    assert [h.status for h in rig.engine.history("c1")] == [StepStatus.COMPLETED] * STEPS
    rig.store.assert_versions_contiguous()


def test_one_step_mode_reads_once_per_step_and_sends_each_next_step(aws, make_engine, clock, reg, rec):
    rig = build_rig(aws, make_engine, clock, reg, config=EngineConfig(chain=False))
    rig.driver.remaining = lambda: 60.0
    rig.engine.start("six", {}, execution_id="o1")
    assert rig.driver.pump() == STEPS
    assert rig.engine.get("o1").status is Status.COMPLETED
    assert rig.store.calls["get_execution"] == STEPS + 1
    assert len(rig.queue.sent) == STEPS  # the start's message and one per following step


class CancelBetweenLinks:
    """Faults port: right after step ``at`` is checkpointed, someone cancels the execution."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.engine: Any = None

    def point(self, name: str, **info: Any) -> None:
        if name == "after_checkpoint" and info.get("step") == self.at:
            self.engine.cancel(info["execution_id"])


def test_a_write_between_links_makes_the_next_links_conditional_write_fail(aws, make_engine, clock, reg, rec):
    rig = build_rig(aws, make_engine, clock, reg)
    faults = CancelBetweenLinks(at=1)
    rig.engine.faults = faults
    faults.engine = rig.engine
    rig.driver.remaining = lambda: 60.0
    rig.engine.start("six", {}, execution_id="x1")
    rig.driver.pump()

    ex = rig.engine.get("x1")
    # The cancel stands: the link that started from the pre-cancel state lost its advance,
    # and the chain stopped there.
    assert ex.status is Status.CANCELLED and ex.current_step == 2
    assert "s2" not in ex.context
    assert max(i for e, i, _ in rec.runs if e == "x1") == 2
    assert rec.count("x1", 2) <= 1  # at most the one link already under way
    rig.store.assert_versions_contiguous()
