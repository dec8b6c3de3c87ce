"""Engine.start: idempotent on the id, strict on bad input, nothing written when it refuses."""

from __future__ import annotations

import pytest

from engine import Registry, Status, workflow
from engine.errors import ExecutionAlreadyExists, InvalidExecutionId, InvalidInput, PayloadTooLarge, UnknownWorkflow
from tests.integration.engine_support import build_rig

pytestmark = pytest.mark.integration


def one(ctx):
    return {"one": ctx.data.get("n", 0) + 1}


def registry() -> Registry:
    reg = Registry()
    workflow("single", registry=reg)(type("Single", (), {"steps": [one]}))
    return reg


@pytest.fixture
def rig(aws, make_engine, clock):
    return build_rig(aws, make_engine, clock, registry())


def table_items(rig) -> int:
    return rig.aws["dynamodb"].scan(TableName=rig.aws["Table"], Select="COUNT")["Count"]


def test_start_new_writes_running_execution_and_enqueues_first_step(rig):
    ex, created = rig.engine.start("single", {"n": 1}, execution_id="order-1")
    assert created
    assert ex.status is Status.RUNNING and ex.version == 1 and ex.current_step == 0
    assert ex.next_wake_at == pytest.approx(rig.clock.now() + 2 * rig.engine.config.lease_seconds)
    stored = rig.engine.get("order-1")
    assert stored == ex
    assert [(s.message.execution_id, s.message.step, s.message.kind) for s in rig.queue.sent] == [
        ("order-1", 0, "step")
    ]
    assert rig.driver.backlog() == 1


def test_start_generates_an_id_when_none_given(rig):
    ex, created = rig.engine.start("single", None)
    assert created and len(ex.id) == 32 and ex.input == {}


def test_start_same_id_same_input_returns_existing(rig):
    first, _ = rig.engine.start("single", {"n": 1, "b": [1, 2]}, execution_id="same")
    rig.clock.advance(5)
    # Same document, different key order: still the same input.
    again, created = rig.engine.start("single", {"b": [1, 2], "n": 1}, execution_id="same")
    assert not created
    assert again == first
    assert len(rig.queue.sent) == 1, "a repeated start must not enqueue the step again"


def test_start_same_id_different_input_conflicts(rig):
    rig.engine.start("single", {"n": 1}, execution_id="same")
    with pytest.raises(ExecutionAlreadyExists) as err:
        rig.engine.start("single", {"n": 2}, execution_id="same")
    assert err.value.code == "execution_exists"
    assert rig.engine.get("same").input == {"n": 1}


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "slash/id", "ünïcode", 42])
def test_start_bad_id_writes_nothing(rig, bad):
    with pytest.raises(InvalidExecutionId):
        rig.engine.start("single", {}, execution_id=bad)
    assert table_items(rig) == 0 and rig.queue.sent == []


def test_start_unknown_workflow_writes_nothing(rig):
    with pytest.raises(UnknownWorkflow) as err:
        rig.engine.start("nope", {}, execution_id="x1")
    assert "single" in str(err.value)  # the message lists what is registered
    assert table_items(rig) == 0 and rig.queue.sent == []


@pytest.mark.parametrize("bad", [[1, 2], "text", 3, {"s": {1, 2}}, {"f": float("nan")}])
def test_start_non_object_or_unserialisable_input_is_invalid(rig, bad):
    with pytest.raises(InvalidInput):
        rig.engine.start("single", bad, execution_id="x2")
    assert table_items(rig) == 0


def test_start_oversized_input_is_refused_before_any_write(rig):
    with pytest.raises(PayloadTooLarge) as err:
        rig.engine.start("single", {"blob": "x" * 250_000}, execution_id="big")
    assert "400 KB" in str(err.value)
    assert table_items(rig) == 0 and rig.queue.sent == []


def test_start_survives_a_failed_enqueue_and_the_sweeper_recovers(rig):
    rig.queue.fail_sends = 1
    ex, created = rig.engine.start("single", {"n": 1}, execution_id="lost-first")
    assert created and rig.queue.sent == [] and rig.driver.backlog() == 0
    # Nothing is due until the lease runs out.
    assert rig.engine.sweep().redriven == 0
    rig.clock.set(ex.next_wake_at)
    assert rig.engine.sweep().redriven == 1
    rig.driver.pump()
    done = rig.engine.get("lost-first")
    assert done.status is Status.COMPLETED and done.context["one"] == 2


def test_a_missing_queue_is_reported_and_the_execution_is_kept(aws, make_engine):
    from engine.adapters.sqs import SqsQueue
    from engine.errors import ResourceMissing

    missing = aws["StepQueue"].rsplit("/", 1)[0] + "/no-such-queue"
    engine = make_engine(registry=registry(), queue=SqsQueue(aws["sqs"], missing, aws["DeadLetterQueue"]))
    with pytest.raises(ResourceMissing, match="does not exist"):
        engine.start("single", {"n": 1}, execution_id="orphaned")
    # Durable with a wake time: once the queue exists, the sweeper drives it.
    ex = engine.get("orphaned")
    assert ex.status is Status.RUNNING and ex.next_wake_at is not None
