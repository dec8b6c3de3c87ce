"""Fan-out and saga compensation against moto: each committed item or branch undone once, last first."""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, map_items, parallel, step
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow, dead_letters

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, base=1, jitter="none")


class Shop:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (what, idempotency key)
        self.seen: list[dict[str, Any]] = []
        self.fail_undo = 0

    def do(self, name: str, *, fail: bool = False) -> Any:
        def fn(ctx: Any) -> Any:
            self.calls.append((name, ctx.idempotency_key))
            if fail:
                raise NonRetryableError(f"{name} refused")
            return {name: f"{name}-{ctx.item_index}"}

        fn.__name__ = name
        return fn

    def undo(self, name: str) -> Any:
        def fn(ctx: Any) -> Any:
            self.calls.append((f"undo_{name}", ctx.idempotency_key))
            self.seen.append({"result": dict(ctx.result or {}), "failure": dict(ctx.failure or {})})
            if self.fail_undo:
                self.fail_undo -= 1
                raise RuntimeError("undo hiccup")
            return None

        fn.__name__ = f"undo_{name}"
        return fn

    def undone(self) -> list[tuple[str, str]]:
        return [(w, k) for w, k in self.calls if w.startswith("undo_")]


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def reg(shop: Shop) -> Registry:
    reg = Registry()
    branches = parallel(
        step(shop.do("reserve"), compensate=shop.undo("reserve"), compensate_retry=QUICK),
        step(shop.do("authorize"), compensate=shop.undo("authorize")),
        step(shop.do("notify")),  # no compensation: never undone
        name="prepare",
    )
    add_workflow(reg, "order", [branches, step(shop.do("ship", fail=True), name="ship")], retry=QUICK)
    failing = parallel(
        step(shop.do("reserve"), compensate=shop.undo("reserve")),
        step(shop.do("authorize", fail=True), compensate=shop.undo("authorize")),
        name="prepare",
        on_failure="fail",  # a declined card undoes the reservation instead of shipping without payment
    )
    add_workflow(reg, "declined", [failing, step(shop.do("ship"), name="ship")], retry=QUICK)

    def lines(ctx: Any) -> Any:
        return ctx.data["lines"]

    priced = map_items(items=lines, run=shop.do("hold"), name="hold", max_concurrency=2, compensate=shop.undo("hold"))
    add_workflow(reg, "held", [priced, step(shop.do("ship", fail=True), name="ship")], retry=QUICK)

    def fallback_down(ctx: Any, error: Any) -> Any:
        shop.calls.append(("catch", ctx.idempotency_key))
        raise NonRetryableError("the fallback is down too")

    caught = parallel(
        step(shop.do("reserve"), compensate=shop.undo("reserve")),
        step(shop.do("authorize", fail=True), compensate=shop.undo("authorize")),
        name="prepare",
        catch=fallback_down,
        on_failure="fail",
    )
    add_workflow(reg, "declined_caught", [caught, step(shop.do("ship"), name="ship")], retry=QUICK)

    def hold_but_the_last(ctx: Any) -> Any:
        if ctx.item_index == 3:
            raise NonRetryableError("line 3 cannot be held")
        return shop.do("hold")(ctx)

    caught_map = map_items(
        items=lines,
        run=hold_but_the_last,
        name="hold",
        max_concurrency=2,
        compensate=shop.undo("hold"),
        catch=fallback_down,
        on_failure="fail",
    )
    add_workflow(reg, "held_caught", [caught_map, step(shop.do("ship"), name="ship")], retry=QUICK)

    once = RetryPolicy(max_attempts=1)
    strict = parallel(
        step(shop.do("reserve"), compensate=shop.undo("reserve"), compensate_retry=once),
        step(shop.do("reserve_more"), compensate=shop.undo("reserve_more"), compensate_retry=once),
        name="prepare",
    )
    add_workflow(reg, "strict", [strict, step(shop.do("ship", fail=True), name="ship")], retry=QUICK)
    return reg


def test_a_later_failure_undoes_each_committed_branch_once_last_first(rig, shop):
    rig.engine.start("order", {}, execution_id="o1")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("o1")
    assert ex.status.value == "COMPENSATED"
    assert shop.undone() == [("undo_authorize", "o1:0:1:compensate"), ("undo_reserve", "o1:0:0:compensate")]
    assert shop.seen[0]["result"] == {"authorize": "authorize-1"}, "the undo sees the branch's committed result"
    assert shop.seen[0]["failure"]["message"] == "ship refused"
    names = [r.name for r in rig.engine.history("o1")]
    assert names[-2:] == ["prepare[1]#compensate", "prepare[0]#compensate"], "after the forward records, as run"
    assert not dead_letters(rig.aws)


def test_a_failed_branch_undoes_the_branches_that_committed_and_only_them(rig, shop):
    rig.engine.start("declined", {}, execution_id="d1")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("d1")
    assert ex.status.value == "COMPENSATED", ex.error
    assert shop.undone() == [("undo_reserve", "d1:0:0:compensate")], "authorize never committed: never undone"
    assert ex.error["type"] == "FanoutFailed"


def test_each_committed_item_of_a_map_is_undone_once_in_reverse_order(rig, shop):
    shop.fail_undo = 1  # the first undo fails once and is retried by its own policy
    rig.engine.start("held", {"lines": [10, 11, 12, 13]}, execution_id="m1")
    rig.driver.pump(max_batches=300)
    assert rig.status("m1") == "COMPENSATED"
    keys = [k for _, k in shop.undone()]
    assert keys == [
        "m1:0:3:compensate",
        "m1:0:3:compensate",
        "m1:0:2:compensate",
        "m1:0:1:compensate",
        "m1:0:0:compensate",
    ]
    record = rig.engine.store.get_step("m1", 0, "hold[3]#compensate")
    assert record.status is StepStatus.COMPLETED
    assert [a.outcome.value for a in record.attempts] == ["failed", "completed"]


def test_a_cancel_with_compensate_mid_map_undoes_what_committed_and_fences_the_rest(rig, shop):
    rig.engine.start("held", {"lines": [1, 2, 3, 4, 5, 6]}, execution_id="c1")
    rig.driver.deliver(rig.driver.receive(1))  # open: items 0 and 1 queued
    rig.driver.deliver(rig.driver.receive(1))  # item 0 commits, item 2 queued
    rig.engine.cancel("c1", compensate=True)
    rig.driver.pump(max_batches=200)
    assert rig.status("c1") == "COMPENSATED"
    assert [k for _, k in shop.undone()] == ["c1:0:0:compensate"]
    assert rig.engine.store.get_join("c1", 0).decided == "FAILED", "the compensation fenced the join"


def test_a_caught_parallel_whose_handler_fails_undoes_its_own_committed_branches(rig, shop):
    rig.engine.start("declined_caught", {}, execution_id="d2")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("d2")
    assert ("catch", "d2:0:catch") in shop.calls, "the handler ran, and failed for good"
    assert ex.status.value == "COMPENSATED", ex.error
    assert shop.undone() == [("undo_reserve", "d2:0:0:compensate")], "as without the catch"


def test_a_caught_map_whose_handler_fails_undoes_its_own_committed_items(rig, shop):
    rig.engine.start("held_caught", {"lines": [10, 11, 12, 13]}, execution_id="m2")
    rig.driver.pump(max_batches=300)
    ex = rig.engine.get("m2")
    assert ex.status.value == "COMPENSATED", ex.error
    committed = [r.index for r in rig.engine.store.fan_items("m2", 0, 1, 0, 4) if r.status is StepStatus.COMPLETED]
    assert committed and [k for _, k in shop.undone()] == [
        f"m2:0:{i}:compensate" for i in sorted(committed, reverse=True)
    ]


def test_a_crash_after_one_branchs_undo_does_not_charge_the_next_branch_a_lost_worker(rig, shop):
    rig.engine.start("strict", {}, execution_id="x1")
    while rig.status("x1") != "COMPENSATING":
        rig.driver.deliver(rig.driver.receive(1))
    rig.faults.arm("after_step", step=0)  # the worker dies right after the first undo's commit
    rig.driver.pump(max_batches=100)
    for _ in range(5):  # the redelivery, or the sweeper's redrive of the lapsed lease
        if rig.engine.get("x1").terminal:
            break
        rig.clock.advance(rig.engine.config.lease_seconds * 3)
        rig.engine.sweep()
        rig.driver.pump(max_batches=100)
    ex = rig.engine.get("x1")
    assert rig.faults.fired and ex.status.value == "COMPENSATED", ex.error
    assert shop.undone() == [("undo_reserve_more", "x1:0:1:compensate"), ("undo_reserve", "x1:0:0:compensate")]
    record = rig.engine.store.get_step("x1", 0, "prepare[0]#compensate")
    assert [a.outcome.value for a in record.attempts] == ["completed"], "no lost worker charged to it"
