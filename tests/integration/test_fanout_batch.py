"""A fan-out's outcome is a batch result (issue #22 item 1), against moto.

The reference's rule (DESIGN.md "Fan-out", "Batch results"): failed items never fail the
step; once no item may start (a failure with no tolerance, failures past it, or
``min_successful`` in), each slot declines its next item, the items already started run to
their ends, and the join closes with a reason the next step reads from ``ctx.batch(name)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, map_items, parallel, step
from engine.ports import FaultPoint
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow, build_rig

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(max_attempts=1)


class World:
    def __init__(self) -> None:
        self.fail: set[int] = set()
        self.runs: list[int] = []
        self.undone: list[int] = []
        self.read: list[dict[str, Any]] = []

    def item(self, ctx: Any) -> Any:
        self.runs.append(ctx.item_index)
        if ctx.item_index in self.fail:
            raise NonRetryableError(f"item {ctx.item_index} refused")
        return {"n": ctx.item_index} if ctx.item is None else ctx.item * 10

    def undo(self, ctx: Any) -> None:
        self.undone.append(ctx.item_index)

    def report(self, ctx: Any) -> dict[str, Any]:
        batch = ctx.batch("work")
        self.read.append({"reason": batch.reason.value, "failed": batch.failed, "not_started": batch.not_started})
        return {"reason": batch.reason.value, "errors": [e.index for e in batch.errors]}

    def insist(self, ctx: Any) -> None:
        ctx.batch("work").raise_if_failed()


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def batch_rig(aws, make_engine, clock, world: World) -> Any:
    reg = Registry()
    branch = step(world.item, retry=ONCE)
    three = [branch, step(world.item, name="b1", retry=ONCE), step(world.item, name="b2", retry=ONCE)]
    add_workflow(reg, "quorum3", [parallel(*three, name="work", min_successful=3), step(world.report)])
    add_workflow(reg, "one_at_a_time", [parallel(*three, name="work", max_concurrency=1), step(world.report)])
    tolerant = map_items(items=lambda ctx: list(range(20)), run=world.item, name="work", max_concurrency=3, retry=ONCE)
    add_workflow(reg, "tolerant", [_with(tolerant, tolerated_failures=2), step(world.report)])
    undoable = map_items(
        items=lambda ctx: list(range(4)), run=world.item, name="work", compensate=world.undo, retry=ONCE
    )
    add_workflow(reg, "insist", [undoable, step(world.insist, retry=ONCE)])
    first = map_items(items=lambda ctx: [0, 1, 2], run=world.item, name="work", max_concurrency=1, min_successful=1)
    add_workflow(reg, "first_of_three", [first, step(world.report)])
    return build_rig(aws, make_engine, clock, reg)


def _with(spec: Any, **policy: Any) -> Any:
    return map_items(
        items=spec.items, run=spec.branches[0], name=spec.name, max_concurrency=spec.max_concurrency, **policy
    )


def test_a_failed_branch_is_in_the_batch_and_the_next_step_runs(batch_rig, world):
    """The issue's case: min_successful=3 over ok/fail/ok. Every branch had started, so every
    branch runs to its end and the batch says ALL_COMPLETED with the failure in it."""
    world.fail = {1}
    batch_rig.engine.start("quorum3", {}, execution_id="p1")
    batch_rig.driver.pump(max_batches=50)
    ex = batch_rig.engine.get("p1")
    assert ex.status.value == "COMPLETED", "a failed branch does not fail the step"
    assert sorted(world.runs) == [0, 1, 2], "every started branch ran"
    assert ex.context["reason"] == "ALL_COMPLETED" and ex.context["errors"] == [1]
    batch = ex.context["work:batch"]
    assert (batch["succeeded"], batch["failed"], batch["not_started"]) == (2, 1, 0)
    assert batch["errors"][0]["type"] == "NonRetryableError" and "item 1 refused" in batch["errors"][0]["message"]
    batch_rig.store.assert_versions_contiguous()


def test_with_no_tolerance_a_failure_stops_new_starts_and_the_rest_is_not_started(batch_rig, world):
    world.fail = {1}
    batch_rig.engine.start("one_at_a_time", {}, execution_id="p2")
    batch_rig.driver.pump(max_batches=50)
    ex = batch_rig.engine.get("p2")
    assert ex.status.value == "COMPLETED"
    assert world.runs == [0, 1], "the branch after the failure never started"
    assert world.read == [{"reason": "FAILURE_TOLERANCE_EXCEEDED", "failed": 1, "not_started": 1}]
    record = batch_rig.engine.store.get_item("p2", 0, 2, 1)
    assert record is not None and record.status is StepStatus.NOT_STARTED, "declined, and recorded as such"


def test_failures_past_the_tolerance_close_the_batch_once_the_started_items_end(batch_rig, world):
    world.fail = {0, 1, 2}
    batch_rig.engine.start("tolerant", {}, execution_id="t1")
    batch_rig.driver.pump(max_batches=200)
    ex = batch_rig.engine.get("t1")
    assert ex.status.value == "COMPLETED"
    batch = ex.context["work:batch"]
    assert batch["reason"] == "FAILURE_TOLERANCE_EXCEEDED" and batch["failed"] == 3
    assert batch["succeeded"] + batch["failed"] + batch["not_started"] == 20
    assert batch["not_started"] > 0, "no item started once the failures passed the tolerance"
    records = batch_rig.engine.store.fan_items("t1", 0, 1, 0, 20)
    final = {r.index for r in records if r.status in (StepStatus.COMPLETED, StepStatus.FAILED)}
    assert set(world.runs) == final, "every item that started ran to its end before the join"
    join = batch_rig.engine.store.get_join("t1", 0)
    assert join.ends + join.declined == join.slots == 3, "each slot ended, or declined its next item"
    assert ex.context["work"] == [None if i not in final or i in world.fail else i * 10 for i in range(20)]


def test_raising_from_the_batch_fails_the_next_step_and_undoes_the_committed_items(batch_rig, world):
    world.fail = {2}
    batch_rig.engine.start("insist", {}, execution_id="r1")
    batch_rig.driver.pump(max_batches=100)
    ex = batch_rig.engine.get("r1")
    assert ex.status.value == "COMPENSATED", "the step that raised from the batch failed; the saga undid the map"
    assert "FanoutFailed" in str(ex.error) and "item 2" in str(ex.error)
    assert sorted(world.undone) == [0, 1, 3], "the committed items are undone, the failed one is not"


def test_a_crash_before_a_slot_declines_its_next_item_is_recovered(batch_rig, world):
    batch_rig.engine.start("first_of_three", {}, execution_id="c1")
    # The worker dies after item 0's commit, the success that ends the batch: nobody declined item 1.
    batch_rig.faults.arm(FaultPoint.AFTER_CHECKPOINT, step=0, times=1)
    batch_rig.driver.pump(max_batches=50)
    assert batch_rig.driver.crashes, "the redelivered message (or the sweeper's redrive) declines item 1"
    batch_rig.clock.advance(3 * batch_rig.engine.config.lease_seconds)
    batch_rig.engine.sweep()
    batch_rig.driver.pump(max_batches=50)
    ex = batch_rig.engine.get("c1")
    assert ex.status.value == "COMPLETED" and world.runs == [0], "the items after the quorum never ran"
    assert world.read == [{"reason": "MIN_SUCCESSFUL_REACHED", "failed": 0, "not_started": 2}]
    assert batch_rig.engine.store.get_item("c1", 0, 1, 1).status is StepStatus.NOT_STARTED
    assert batch_rig.engine.store.get_join("c1", 0).declined == 1, "the slot is counted once"
    batch_rig.store.assert_versions_contiguous()
