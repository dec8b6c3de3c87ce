"""A map item that waits (issue #22 item 6), against moto: each item is a child workflow whose
steps wait on a callback or a signal of the item's own. Loom's nesting unit is the child
workflow (DESIGN.md "Lambda durable functions vs Loom"), so an item waits exactly as a
workflow does, and the map joins once every item's child has ended."""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, map_items, step
from engine.fan_children import item_child_id
from engine.workflow import wait_for_callback, wait_for_signal
from tests.integration.engine_support import add_workflow

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(max_attempts=1)


class Approvers:
    def __init__(self) -> None:
        self.tokens: dict[Any, str] = {}

    def submit(self, ctx: Any, token: str) -> None:
        self.tokens[ctx.data["item"]] = token  # the approver of this line gets its own token

    def approved(self, ctx: Any) -> dict[str, Any]:
        if not ctx.data["approval"].get("ok"):
            raise NonRetryableError(f"line {ctx.data['item']} was turned down")
        return {"line": ctx.data["item"], "by": ctx.data["approval"]["by"]}

    def counted(self, ctx: Any) -> dict[str, Any]:
        return {"line": ctx.data["item"], "counted": ctx.data["n"]}


@pytest.fixture
def approvers() -> Approvers:
    return Approvers()


@pytest.fixture
def waits_rig(aws, make_engine, clock, approvers: Approvers) -> Any:
    from tests.integration.engine_support import build_rig

    reg = Registry()
    add_workflow(
        reg,
        "approve_line",
        [wait_for_callback("approval", submit=approvers.submit, timeout=3600), step(approvers.approved)],
        retry=ONCE,
    )
    add_workflow(reg, "count_line", [wait_for_signal("count", timeout=3600), step(approvers.counted)], retry=ONCE)

    def lines(ctx: Any) -> Any:
        return ctx.data["lines"]

    add_workflow(
        reg, "approvals", [map_items(items=lines, run="approve_line", name="lines", max_concurrency=0)], retry=ONCE
    )
    add_workflow(reg, "counts", [map_items(items=lines, run="count_line", name="lines", max_concurrency=2)], retry=ONCE)
    return build_rig(aws, make_engine, clock, reg)


def test_each_item_waits_on_a_callback_of_its_own_answered_in_any_order(waits_rig, approvers):
    waits_rig.engine.start("approvals", {"lines": ["a", "b", "c"]}, execution_id="m1")
    waits_rig.driver.pump(max_batches=50)
    assert sorted(approvers.tokens) == ["a", "b", "c"], "three callbacks pending at once, one per item"
    assert waits_rig.status("m1") == "RUNNING"
    for line in ("c", "a", "b"):
        waits_rig.engine.complete_callback(
            approvers.tokens[line], "succeed", {"result": {"approval": {"ok": True, "by": line}}}
        )
        waits_rig.driver.pump(max_batches=50)
    ex = waits_rig.engine.get("m1")
    assert ex.status.value == "COMPLETED"
    assert [r["by"] for r in ex.context["lines"]] == ["a", "b", "c"], "results in item order, not answer order"
    assert ex.context["lines:batch"]["reason"] == "ALL_COMPLETED"


def test_an_item_turned_down_is_a_failure_in_the_batch(waits_rig, approvers):
    waits_rig.engine.start("approvals", {"lines": ["a", "b"]}, execution_id="m2")
    waits_rig.driver.pump(max_batches=50)
    waits_rig.engine.complete_callback(
        approvers.tokens["a"], "succeed", {"result": {"approval": {"ok": True, "by": "x"}}}
    )
    waits_rig.engine.complete_callback(approvers.tokens["b"], "succeed", {"result": {"approval": {"ok": False}}})
    waits_rig.driver.pump(max_batches=80)
    ex = waits_rig.engine.get("m2")
    assert ex.status.value == "COMPLETED", "a turned-down line does not fail the map"
    batch = ex.context["lines:batch"]
    assert (batch["succeeded"], batch["failed"]) == (1, 1) and batch["errors"][0]["type"] == "ChildFailed"
    assert ex.context["lines"][0]["by"] == "x" and ex.context["lines"][1] is None, (
        "an item's result: its child's context"
    )


def test_each_item_waits_on_a_signal_sent_to_its_child(waits_rig):
    waits_rig.engine.start("counts", {"lines": [10, 20, 30]}, execution_id="s1")
    waits_rig.driver.pump(max_batches=50)
    # The window (2) has started items 0 and 1; each item's child has a deterministic id.
    for idx, n in ((1, 7), (0, 3)):
        waits_rig.engine.signal(item_child_id("s1", 0, 1, idx), "count", {"n": n})
        waits_rig.driver.pump(max_batches=50)
    waits_rig.engine.signal(item_child_id("s1", 0, 1, 2), "count", {"n": 9})  # item 2 started once a slot freed
    waits_rig.driver.pump(max_batches=50)
    ex = waits_rig.engine.get("s1")
    assert ex.status.value == "COMPLETED"
    assert [(r["line"], r["counted"]) for r in ex.context["lines"]] == [(10, 3), (20, 7), (30, 9)]
