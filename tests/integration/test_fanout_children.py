"""Child workflows as fan-out items against moto: each item's child runs once per attempt, its end
wakes the parent's item, a cancel of the parent cancels the children still running."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Registry, RetryPolicy, map_items, parallel, sleep, step
from engine.fan_children import item_child_id
from engine.workflow import child
from tests.integration.engine_support import add_workflow

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=3, base=1, jitter="none")


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    def reserve(ctx: Any) -> dict[str, Any]:
        return {"reserved": True}

    def notify(ctx: Any) -> dict[str, Any]:
        return {"notified": ctx.data.get("order")}

    failures = {2: 1}  # item 2's first child fails (its retry policy: 1 attempt), the next succeeds

    def price_one(ctx: Any) -> dict[str, Any]:
        if failures.get(ctx.data["item"]):
            failures[ctx.data["item"]] -= 1
            raise RuntimeError("price service down")
        return {"price": ctx.data["item"] * 10}

    add_workflow(reg, "notify", [step(notify)])
    add_workflow(reg, "price_one", [step(price_one)], retry=RetryPolicy(max_attempts=1))
    add_workflow(reg, "slow_one", [sleep(hours=1), step(price_one)])
    order_input = lambda ctx: {"order": ctx.data["order"]}  # noqa: E731
    add_workflow(reg, "order", [parallel(reserve, child("notify", input=order_input), name="prepare")], retry=QUICK)

    def lines(ctx: Any) -> Any:
        return ctx.data["lines"]

    add_workflow(
        reg, "priced", [map_items(items=lines, run="price_one", name="prices", max_concurrency=2)], retry=QUICK
    )
    add_workflow(reg, "slow", [map_items(items=lines, run="slow_one", name="prices", max_concurrency=2)], retry=QUICK)
    return reg


def test_a_parallel_branch_can_be_a_child_workflow(rig):
    rig.engine.start("order", {"order": "o-7"}, execution_id="p1")
    rig.driver.pump(max_batches=100)
    ex = rig.engine.get("p1")
    assert ex.status.value == "COMPLETED", ex.error
    assert ex.context["reserved"] is True and ex.context["notified"] == "o-7"
    kid = rig.engine.get(item_child_id("p1", 0, 1, 1))
    assert kid.status.value == "COMPLETED" and kid.parent == {"id": "p1", "step": 0, "attempt": 1, "item": 1}


def test_a_map_over_a_workflow_name_runs_one_child_per_item_and_retries_a_failed_one(rig):
    rig.engine.start("priced", {"lines": [0, 1, 2, 3]}, execution_id="m1")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("m1")
    assert ex.status.value == "COMPLETED", ex.error
    assert [r["price"] for r in ex.context["prices"]] == [0, 10, 20, 30]
    assert rig.engine.get(item_child_id("m1", 0, 1, 2)).status.value == "FAILED"
    assert rig.engine.get(item_child_id("m1", 0, 2, 2)).status.value == "COMPLETED", "the retry started a new child"
    record = rig.engine.store.get_item("m1", 0, 2, 1)
    assert [a.outcome.value for a in record.attempts] == ["failed", "completed"]


def test_cancelling_the_parent_cancels_its_running_child_items(rig):
    rig.engine.start("slow", {"lines": [0, 1, 2, 3]}, execution_id="c1")
    rig.driver.pump(max_batches=50)
    kids = [item_child_id("c1", 0, 1, i) for i in (0, 1)]
    assert [rig.status(k) for k in kids] == ["SLEEPING", "SLEEPING"], "the window's two children are running"
    rig.engine.cancel("c1")
    rig.driver.pump(max_batches=50)
    assert rig.status("c1") == "CANCELLED"
    assert [rig.status(k) for k in kids] == ["CANCELLED", "CANCELLED"]
    assert rig.engine.store.get_execution(item_child_id("c1", 0, 1, 2)) is None, "no new item started"
