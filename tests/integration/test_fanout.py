"""Fan-out against moto: map and parallel, the window, the completion policy, the join exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, map_items, parallel, step
from engine.messages import MessageKind, StepMessage
from engine.ports import FaultPoint
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=3, base=1, jitter="none")


class Lines:
    """An item function that counts how many items run at once and how often each ran."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.runs: list[tuple[int, int, str]] = []  # (item index, attempt, idempotency key)
        self.fail: dict[int, int] = {}  # item -> failures left (-1: always, non-retryable)
        self.parent: list[Any] = []

    def price(self, ctx: Any) -> Any:
        self.runs.append((ctx.item_index, ctx.attempt, ctx.idempotency_key))
        left = self.fail.get(ctx.item_index, 0)
        if left == -1:
            raise NonRetryableError(f"line {ctx.item_index} has no price")
        if left:
            self.fail[ctx.item_index] = left - 1
            raise RuntimeError("price service hiccup")
        return {"line": ctx.item, "price": ctx.item * 10}

    def count(self, idx: int) -> int:
        return sum(1 for i, _, _ in self.runs if i == idx)


def lines_of(ctx: Any) -> Any:
    return ctx.data["lines"]


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture
def reg(lines: Lines) -> Registry:
    reg = Registry()

    def total(ctx: Any) -> dict[str, Any]:
        lines.parent.append(list(ctx.results("price", page_size=7)))
        return {"total": sum(r["price"] for r in ctx.results("price") if r is not None)}

    add_workflow(
        reg,
        "priced",
        [map_items(items=lines_of, run=lines.price, name="price", max_concurrency=5, retry=QUICK), step(total)],
        retry=QUICK,
    )
    add_workflow(
        reg,
        "tolerant",
        [
            map_items(items=lines_of, run=lines.price, name="price", max_concurrency=3, tolerated_failures=2),
            step(total),
        ],
    )
    fail_fast = map_items(
        items=lines_of, run=lines.price, name="price", max_concurrency=3, tolerated_failures=2, on_failure="fail"
    )
    add_workflow(reg, "tolerant_fail", [fail_fast, step(total)])
    add_workflow(
        reg,
        "quorum",
        [map_items(items=lines_of, run=lines.price, name="price", max_concurrency=2, min_successful=3), step(total)],
    )

    def reserve(ctx: Any) -> dict[str, Any]:
        return {"reserved": ctx.idempotency_key}

    def authorize(ctx: Any) -> dict[str, Any]:
        return {"authorized": True}

    def ship(ctx: Any) -> dict[str, Any]:
        return {"shipped": ctx.data["reserved"]}

    add_workflow(reg, "order", [parallel(reserve, authorize, name="prepare"), step(ship)])
    add_workflow(reg, "no_branches", [parallel(name="nothing"), step(authorize)])
    add_workflow(reg, "unbounded", [map_items(items=lines_of, run=lines.price, name="price", max_concurrency=0)])
    return reg


def start(rig: Any, workflow: str, n: int, eid: str) -> None:
    rig.engine.start(workflow, {"lines": list(range(n))}, execution_id=eid)


def test_a_map_of_25_items_window_5_completes_with_results_in_item_order(rig, lines):
    start(rig, "priced", 25, "m1")
    rig.driver.pump(max_batches=400)
    ex = rig.engine.get("m1")
    assert ex.status.value == "COMPLETED"
    assert ex.context["price"] == [{"line": i, "price": i * 10} for i in range(25)]
    assert ex.context["total"] == sum(i * 10 for i in range(25))
    assert lines.parent == [ex.context["price"]], "ctx.results pages the inline list in item order"
    assert sorted(i for i, _, _ in lines.runs) == list(range(25)), "each item ran once"
    assert {k for _, _, k in lines.runs} == {f"m1:0:{i}" for i in range(25)}, "keys are <id>:<step>:<idx>"
    item_sends = [s for s in rig.queue.sent if s.message.kind is MessageKind.ITEM]
    assert len(item_sends) == 25, "one send per item on the happy path"
    rig.store.assert_versions_contiguous()


def test_never_more_than_the_window_in_flight(rig, lines):
    start(rig, "priced", 12, "w1")
    # Take every message the queue offers before running any: the window is all there is.
    offered = rig.driver.receive(10)
    offered += rig.driver.receive(10)
    items = [StepMessage.decode(m["Body"]) for m in offered]
    assert [m.kind for m in items] == [MessageKind.STEP]
    rig.driver.deliver(offered)
    waiting = rig.driver.receive(10) + rig.driver.receive(10)
    assert sorted(StepMessage.decode(m["Body"]).item for m in waiting) == [0, 1, 2, 3, 4]
    rig.driver.deliver(waiting[:1])  # item done: exactly one more starts
    more = rig.driver.receive(10)
    assert [StepMessage.decode(m["Body"]).item for m in more] == [5]
    for m in waiting[1:] + more:
        rig.driver.release(m)
    rig.driver.pump(max_batches=200)
    assert rig.status("w1") == "COMPLETED"


def test_an_empty_parallel_is_over_as_it_opens_and_the_next_step_runs(rig):
    rig.engine.start("no_branches", {}, execution_id="e0")
    rig.driver.pump(max_batches=20)
    ex = rig.engine.get("e0")
    assert ex.status.value == "COMPLETED" and ex.context["authorized"] is True
    batch = ex.context["nothing:batch"]
    assert (batch["reason"], batch["total"], batch["failed"]) == ("ALL_COMPLETED", 0, 0), "an empty batch"
    assert not [s for s in rig.queue.sent if s.message.kind is MessageKind.ITEM], "no item to send"
    rig.store.assert_versions_contiguous()


def test_a_map_without_a_window_sends_every_item_as_it_opens(rig, lines):
    start(rig, "unbounded", 12, "u1")
    opening = rig.driver.receive(10)
    assert [StepMessage.decode(m["Body"]).kind for m in opening] == [MessageKind.STEP]
    rig.driver.deliver(opening)
    assert lines.runs == [], "no item has run yet"
    sent = [s.message.item for s in rig.queue.sent if s.message.kind is MessageKind.ITEM]
    assert sorted(sent) == list(range(12)), "max_concurrency=0: every item goes out with the open"
    rig.driver.pump(max_batches=200)
    assert rig.status("u1") == "COMPLETED"
    assert sorted(i for i, _, _ in lines.runs) == list(range(12))


def test_per_item_retries_follow_the_items_policy(rig, lines):
    lines.fail[3] = 2
    start(rig, "priced", 6, "r1")
    rig.driver.pump(max_batches=200)
    assert rig.status("r1") == "COMPLETED"
    assert lines.count(3) == 3 and [a for i, a, _ in lines.runs if i == 3] == [1, 2, 3]
    record = rig.engine.store.get_item("r1", 0, 3, 1)
    assert [a.outcome.value for a in record.attempts] == ["failed", "failed", "completed"]
    retries = [s for s in rig.queue.sent if s.message.item == 3 and s.delay > 0]
    assert [s.delay for s in retries] == [1, 2], "the backoff is the item's own"


def test_failure_past_tolerance_fails_the_execution_and_stops_new_items(rig, lines):
    for i in (0, 1, 2):
        lines.fail[i] = -1
    start(rig, "tolerant_fail", 20, "t1")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("t1")
    assert ex.status.value == "FAILED"
    assert ex.error["type"] == "FanoutFailed" and ex.error["reason"] == "completion_policy"
    assert len({i for i, _, _ in lines.runs}) < 20, "once decided, the remaining items never start"


def test_tolerated_failures_leave_none_in_their_place(rig, lines):
    lines.fail[4] = -1
    start(rig, "tolerant", 8, "t2")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("t2")
    assert ex.status.value == "COMPLETED"
    assert ex.context["price"][4] is None and ex.context["price"][5] == {"line": 5, "price": 50}


def test_min_successful_succeeds_early_and_stops_starting_items(rig, lines):
    start(rig, "quorum", 10, "q1")
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("q1")
    assert ex.status.value == "COMPLETED"
    assert len(lines.runs) < 10, "items after the quorum are not started"
    assert sum(r is not None for r in ex.context["price"]) >= 3


def test_duplicate_item_deliveries_and_racing_completions_advance_once(rig, lines):
    start(rig, "priced", 4, "d1")
    rig.driver.deliver(rig.driver.receive(1))  # open: items 0..3 queued
    waiting = rig.driver.receive(10)
    for m in waiting:  # every item delivered twice: a duplicate of each, run after the original
        rig.engine.queue.inner.send(StepMessage.decode(m["Body"]), 0)
    rig.driver.deliver(waiting)
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("d1")
    assert ex.status.value == "COMPLETED"
    assert ex.context["price"] == [{"line": i, "price": i * 10} for i in range(4)]
    assert len(lines.runs) == 4, "a duplicate of a final item runs nothing"
    record = rig.engine.store.get_step("d1", 0, "price")
    assert [a.attempt for a in record.attempts] == [1], "the step committed once"
    assert rig.engine.store.get_join("d1", 0).ok == 4, "each item counted once"
    advances = [v for v in rig.store.written["d1"]]
    assert advances == sorted(set(advances)), "no version written twice"
    rig.store.assert_versions_contiguous()


def test_a_crash_between_item_commit_and_join_is_joined_once_by_the_sweeper(rig, lines):
    start(rig, "priced", 3, "c1")
    rig.faults.arm(FaultPoint.AFTER_CHECKPOINT, step=0, times=1)
    rig.driver.pump(max_batches=200)
    assert rig.driver.crashes, "the worker died after an item's commit, before the join or the next send"
    assert rig.status("c1") in ("RUNNING", "COMPLETED")
    rig.clock.advance(3 * rig.engine.config.lease_seconds)
    rig.engine.sweep()
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("c1")
    assert ex.status.value == "COMPLETED"
    assert ex.context["price"] == [{"line": i, "price": i * 10} for i in range(3)]
    assert rig.engine.store.get_join("c1", 0).ok == 3
    assert [a.attempt for a in rig.engine.store.get_step("c1", 0, "price").attempts] == [1]
    rig.store.assert_versions_contiguous()


def test_a_lost_item_message_is_resent_by_the_sweepers_redrive(rig, lines):
    start(rig, "priced", 3, "l1")
    rig.driver.deliver(rig.driver.receive(1))
    lost = rig.driver.receive(10)
    for m in lost[:1]:
        rig.driver.delete(m)  # lost for good
    for m in lost[1:]:
        rig.driver.release(m)
    rig.driver.pump(max_batches=50)
    assert rig.status("l1") == "RUNNING"
    rig.clock.advance(3 * rig.engine.config.lease_seconds)
    assert rig.engine.sweep().redriven == 1
    rig.driver.pump(max_batches=50)
    assert rig.status("l1") == "COMPLETED"


def test_cancel_stops_new_items(rig, lines):
    start(rig, "priced", 10, "x1")
    rig.driver.deliver(rig.driver.receive(1))
    rig.engine.cancel("x1")
    rig.driver.pump(max_batches=50)
    assert rig.status("x1") == "CANCELLED"
    assert lines.runs == [], "every item message found its parent cancelled"


def test_bad_items_fail_the_step_with_a_clear_error(rig, lines):
    rig.engine.start("priced", {"lines": "not a list"}, execution_id="b1")
    rig.driver.pump(max_batches=20)
    ex = rig.engine.get("b1")
    assert ex.status.value == "FAILED" and ex.error["type"] == "InvalidFanoutItems"
    assert "must return a list" in ex.error["message"]


def test_an_empty_map_joins_at_once(rig, lines):
    start(rig, "priced", 0, "e1")
    rig.driver.pump(max_batches=20)
    ex = rig.engine.get("e1")
    assert ex.status.value == "COMPLETED" and ex.context["price"] == [] and ex.context["total"] == 0


def test_parallel_branches_merge_in_branch_order_with_their_own_keys(rig):
    rig.engine.start("order", {}, execution_id="p1")
    rig.driver.pump(max_batches=50)
    ex = rig.engine.get("p1")
    assert ex.status.value == "COMPLETED"
    assert ex.context["reserved"] == "p1:0:0" and ex.context["authorized"] is True
    assert rig.engine.store.get_step("p1", 0, "prepare").status is StepStatus.COMPLETED


@pytest.fixture
def big_reg() -> Registry:
    reg = Registry()
    seen: list[Any] = []

    def bulky(ctx: Any) -> Any:
        return {"line": ctx.item, "blob": "x" * 15_000}

    def count(ctx: Any) -> dict[str, Any]:
        got = list(ctx.results("rows", page_size=4))
        seen.append(got)
        return {"rows_read": len(got), "in_order": [r["line"] for r in got] == list(range(30))}

    add_workflow(reg, "bulky", [map_items(items=lines_of, run=bulky, name="rows", max_concurrency=10), step(count)])
    reg.seen = seen  # type: ignore[attr-defined]
    return reg


def test_results_too_big_for_the_execution_stay_in_the_item_records_and_page(aws, make_engine, clock, big_reg):
    from tests.integration.engine_support import build_rig

    rig = build_rig(aws, make_engine, clock, big_reg)
    rig.engine.start("bulky", {"lines": list(range(30))}, execution_id="big1")  # 30 x 15 KB > 400 KB
    rig.driver.pump(max_batches=200)
    ex = rig.engine.get("big1")
    assert ex.status.value == "COMPLETED"
    assert ex.context["rows"] == {"$loom": "results", "step": 0, "count": 30, "stored": True}
    assert ex.context["rows_read"] == 30 and ex.context["in_order"] is True
    batch = ex.context["rows:batch"]
    assert (batch["reason"], batch["succeeded"], batch["failed"]) == ("ALL_COMPLETED", 30, 0), "the batch stays inline"
    stored = {"rows": ex.context["rows"], "rows:batch": batch}
    assert rig.engine.store.get_step("big1", 0, "rows").result == stored


def test_at_10000_items_the_join_record_and_the_execution_stay_small(aws, make_engine, clock, reg):
    from engine.adapters.dynamodb import item_size
    from engine.adapters.fan_store import join_key
    from engine.fan_results import step_result
    from engine.join import JoinRecord, shards_for
    from engine.state import Attempt, AttemptOutcome, StepRecord
    from engine.steps import check_result

    n = 10_000
    engine = make_engine(registry=reg)
    engine.start("priced", {"lines": list(range(n))}, execution_id="k10")
    ex = engine.get("k10")
    join = engine.store.open_join(JoinRecord("k10", 0, n, shards_for(n), 50))
    stored = aws["dynamodb"].get_item(TableName=aws["Table"], Key=join_key("k10", 0))["Item"]
    assert item_size(stored) < 200, "the join record holds counters only"
    done = Attempt(1, 0.0, 1.0, AttemptOutcome.COMPLETED)
    records = [
        StepRecord("k10", i, "price", StepStatus.COMPLETED, (done,), {"line": i, "price": i * 10}) for i in range(n)
    ]
    spec = reg.get("priced").steps[0]
    result = step_result(ex, spec, join, records, lambda r: check_result(ex, r))
    new = ex.evolve(1.0, context={**ex.context, **result})
    engine.store.put_execution(new, expected_version=ex.version, expected_step=0)  # fits one item, whichever form
    assert isinstance(result["price"], (list, dict))


def test_a_redelivered_final_item_starts_the_successor_its_dead_worker_never_sent(rig, lines):
    start(rig, "priced", 12, "v1")
    rig.faults.arm(FaultPoint.AFTER_CHECKPOINT, step=0, times=1)
    rig.driver.pump(max_batches=400)  # no sweep: only the redelivery can start the successor
    assert rig.driver.crashes == ["after_checkpoint"]
    ex = rig.engine.get("v1")
    assert ex.status.value == "COMPLETED" and len(ex.context["price"]) == 12
    assert sorted(i for i, _, _ in lines.runs) == list(range(12)), "no item ran twice"


def test_a_map_longer_than_the_lease_keeps_it_and_is_never_redriven(aws, make_engine, clock):
    from tests.integration.engine_support import build_rig

    reg = Registry()
    ran: list[int] = []

    def slow(ctx: Any) -> Any:
        ran.append(ctx.item_index)
        clock.advance(40)  # ten items of 40 s: far past two leases of 60 s
        return ctx.item

    add_workflow(reg, "slow", [map_items(items=lines_of, run=slow, name="slow", max_concurrency=2)])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("slow", {"lines": list(range(10))}, execution_id="s1")
    for _ in range(60):
        batch = rig.driver.receive(1)
        if not batch:
            break
        rig.driver.deliver(batch)
        assert rig.engine.sweep().redriven == 0, "a map making progress is not taken for a lost one"
    assert rig.status("s1") == "COMPLETED" and sorted(ran) == list(range(10))


def test_a_catch_on_a_failed_fanout_lets_the_workflow_go_on(aws, make_engine, clock):
    from tests.integration.engine_support import build_rig

    reg = Registry()

    def ok(ctx: Any) -> Any:
        return {"ok": True}

    def refuse(ctx: Any) -> Any:
        raise NonRetryableError("branch refused")

    def handler(ctx: Any, error: dict[str, Any]) -> dict[str, Any]:
        return {"degraded": error["type"]}

    def after(ctx: Any) -> dict[str, Any]:
        return {"after": ctx.data["degraded"]}

    add_workflow(reg, "caught", [parallel(ok, refuse, name="both", catch=handler, on_failure="fail"), step(after)])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("caught", {}, execution_id="k1")
    rig.driver.pump(max_batches=50)
    ex = rig.engine.get("k1")
    assert ex.status.value == "COMPLETED" and ex.context["after"] == "FanoutFailed"
    assert "ok" not in ex.context, "a failed fan-out merges nothing; its catch's result does"
    names = [r.name for r in rig.engine.history("k1")]
    assert "both#catch" in names


def through(rig: Any, seconds: float) -> int:
    """Let ``seconds`` pass a tenth of a lease at a time, sweeping each tick and delivering
    each message once it is due (SQS's delays on the fake clock); the redrives it took."""
    lease = rig.engine.config.lease_seconds
    end = rig.clock.now() + seconds
    redriven = 0
    held: list[dict[str, Any]] = []  # received once and kept (invisible), not to count receives
    while rig.clock.now() < end:
        rig.clock.advance(lease / 10)
        redriven += rig.engine.sweep().redriven
        messages, held = held + rig.driver.receive(10), []
        for m in messages:
            if rig.queue.visible_at.get(m["Body"], 0.0) <= rig.clock.now():
                rig.driver.deliver([m])
            else:
                held.append(m)
    return redriven


def item_sends(rig: Any) -> int:
    return sum(1 for s in rig.queue.sent if s.message.kind is MessageKind.ITEM)


def test_a_map_behind_a_backlog_is_not_redriven_and_sends_each_item_once(rig, lines):
    start(rig, "priced", 6, "b1")
    rig.driver.deliver(rig.driver.receive(1))  # the open: the first window of 5 goes out
    lease = rig.engine.config.lease_seconds
    redriven = 0
    for _ in range(10):  # ten leases of backlog: the items' messages wait in the queue
        rig.clock.advance(lease)
        redriven += rig.engine.sweep().redriven
    assert redriven == 0, "the opened map is waiting for its items, not lost"
    rig.driver.pump()
    assert rig.status("b1") == "COMPLETED" and item_sends(rig) == 6
    assert sorted(i for i, _, _ in lines.runs) == list(range(6)), "each item ran once"


def test_a_map_item_in_a_long_backoff_runs_each_attempt_once(aws, make_engine, clock):
    from tests.integration.engine_support import build_rig

    reg = Registry()
    ran: list[tuple[int, int]] = []

    def flaky(ctx: Any) -> Any:
        ran.append((ctx.item_index, ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("try again in five minutes")
        return ctx.item

    slow_retry = RetryPolicy(max_attempts=3, base=300, jitter="none")
    add_workflow(reg, "backoff", [map_items(items=lines_of, run=flaky, name="m", retry=slow_retry)])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("backoff", {"lines": [7]}, execution_id="b2")
    redriven = through(rig, 300 + 4 * rig.engine.config.lease_seconds)
    assert rig.status("b2") == "COMPLETED"
    assert ran == [(0, 1), (0, 2)], "attempt 2 ran once"
    assert item_sends(rig) == 2, "the first attempt's message and the retry's, no copies"
    assert redriven == 0, "a map in its item's backoff is healthy, not lost"
