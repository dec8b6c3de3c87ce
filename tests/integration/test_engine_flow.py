"""The happy path, sleeps, cancel and listing, driven through process_batch with SQS's event shape."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, Status, sleep, step
from engine.config import EngineConfig
from engine.errors import AlreadyTerminal, ExecutionNotFound, InvalidInput
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow, build_rig

pytestmark = pytest.mark.integration


@pytest.fixture
def reg(rec):
    reg = Registry()
    add_workflow(
        reg,
        "order",
        [
            rec.step("reserve", lambda ctx: {"reservation": f"r-{ctx.data['order_id']}"}),
            step(rec.step("charge"), semantics="at_most_once", retry=RetryPolicy(max_attempts=2)),
            rec.step("ship", lambda ctx: {"shipped": ctx.data["reservation"]}),
        ],
    )
    add_workflow(reg, "napper", [rec.step("before"), sleep(hours=2), rec.step("after")])
    add_workflow(reg, "short_nap", [sleep(seconds=30), rec.step("after")])
    return reg


def test_happy_path_completes_with_one_result_per_step(rig, rec):
    rig.engine.start("order", {"order_id": "o1"}, execution_id="o1")
    batches = rig.driver.pump()
    assert batches == 3  # one message per step when not chaining
    ex = rig.engine.get("o1")
    assert ex.status is Status.COMPLETED and ex.current_step == 3
    # Due once more: the sweeper stamps its items for retention.
    assert ex.next_wake_at == ex.updated_at + 2 * rig.engine.config.lease_seconds
    assert ex.context == {
        "order_id": "o1",
        "reservation": "r-o1",
        "charge": "charge@1",
        "shipped": "r-o1",
    }
    history = rig.engine.history("o1")
    assert [(h.index, h.name, h.status) for h in history] == [
        (0, "reserve", StepStatus.COMPLETED),
        (1, "charge", StepStatus.COMPLETED),
        (2, "ship", StepStatus.COMPLETED),
    ]
    assert all(len(h.attempts) == 1 and h.attempts[0].outcome == "completed" for h in history)
    assert rec.count("o1") == 3
    # start(1), 3 advances, plus the at_most_once start mark: every write is +1.
    assert rig.store.written["o1"] == [1, 2, 3, 4, 5]
    rig.store.assert_versions_contiguous()
    assert all(r["batchItemFailures"] == [] for r in rig.driver.responses)


def test_a_batch_of_several_executions_is_processed_together(rig):
    for i in range(4):
        rig.engine.start("order", {"order_id": str(i)}, execution_id=f"b{i}")
    rig.driver.pump(batch_size=10)
    assert [rig.status(f"b{i}") for i in range(4)] == ["COMPLETED"] * 4
    assert any(len(r["batchItemFailures"]) == 0 for r in rig.driver.responses)


def test_chaining_runs_every_step_in_one_invocation_and_still_checkpoints(rig, rec):
    rig.driver.remaining = lambda: 600.0
    rig.engine.start("order", {"order_id": "c"}, execution_id="chain")
    assert rig.driver.pump() == 1
    assert rig.status("chain") == "COMPLETED"
    assert len(rig.queue.sent) == 1  # only the start message: every later step was chained
    assert [h.status for h in rig.engine.history("chain")] == [StepStatus.COMPLETED] * 3


def test_chaining_stops_when_the_invocation_runs_low(rig):
    rig.driver.remaining = lambda: rig.engine.config.chain_reserve_seconds - 1
    rig.engine.start("order", {"order_id": "c"}, execution_id="nochain")
    assert rig.driver.pump() == 3


def test_long_sleep_waits_for_the_sweeper(rig, rec):
    rig.engine.start("napper", {}, execution_id="nap")
    rig.driver.pump()
    ex = rig.engine.get("nap")
    assert ex.status is Status.SLEEPING and ex.current_step == 1
    assert ex.next_wake_at == pytest.approx(rig.clock.now() + 7200)
    assert rig.driver.backlog() == 0, "a sleep over 15 minutes sends no message"
    rig.clock.advance(7199)
    assert rig.engine.sweep().woken == 0
    rig.clock.advance(1)
    report = rig.engine.sweep()
    assert (report.due, report.woken) == (1, 1)
    rig.driver.pump()
    ex = rig.engine.get("nap")
    assert ex.status is Status.COMPLETED
    assert rec.count("nap") == 2
    sleep_record = rig.engine.history("nap")[1]
    assert sleep_record.name == "sleep_2h" and sleep_record.status is StepStatus.COMPLETED


def test_short_sleep_first_step_uses_a_delayed_wake_message(rig, rec):
    ex, _ = rig.engine.start("short_nap", {}, execution_id="short")
    assert ex.status is Status.SLEEPING
    assert [(s.message.kind, s.delay) for s in rig.queue.sent] == [("wake", 30)]
    rig.driver.pump()  # the driver holds the message until its delay has passed on the fake clock
    assert rig.status("short") == "COMPLETED"


def test_a_wake_message_that_arrives_early_is_sent_back_and_a_lost_one_is_woken_by_the_sweeper(rig):
    rig.engine.start("short_nap", {}, execution_id="early")
    rig.queue.visible_at.clear()  # deliver at once, 30 s early
    (message,) = rig.driver.receive(1)
    rig.driver.deliver([message])
    assert rig.status("early") == "SLEEPING"
    assert [(s.message.kind, s.delay) for s in rig.queue.sent] == [("wake", 30)] * 2
    rig.driver.receive(1)  # the copy sent back is lost: the wake time is state, not the message
    rig.clock.advance(30)
    assert rig.engine.sweep().woken == 1
    rig.driver.pump()
    assert rig.status("early") == "COMPLETED"


def test_cancel_running_stops_the_next_step(rig, rec):
    rig.engine.start("order", {"order_id": "x"}, execution_id="cx")
    ex = rig.engine.cancel("cx")
    assert ex.status is Status.CANCELLED and ex.expires_at is not None
    rig.driver.pump()
    assert rec.count("cx") == 0
    assert rig.status("cx") == "CANCELLED"


def test_cancel_while_a_step_runs_lets_no_further_step_start(aws, make_engine, clock, rec):
    reg = Registry()
    box = {}
    add_workflow(
        reg, "cancelme", [rec.step("a", lambda ctx: box["engine"].cancel(ctx.execution_id) and None), rec.step("b")]
    )
    rig = build_rig(aws, make_engine, clock, reg)
    box["engine"] = rig.engine
    rig.engine.start("cancelme", {}, execution_id="mid")
    rig.driver.pump()
    assert rig.status("mid") == "CANCELLED"
    assert rec.count("mid", 1) == 0
    assert rig.engine.get("mid").current_step == 0


def test_cancel_sleeping_and_the_sweeper_leaves_it_alone(rig, rec):
    rig.engine.start("napper", {}, execution_id="zz")
    rig.driver.pump()
    rig.engine.cancel("zz")
    rig.clock.advance(7200)
    report = rig.engine.sweep()
    assert (report.due, report.retained, report.woken) == (1, 1, 0), "its retention stamp, never its sleep's end"
    assert rig.engine.sweep().due == 0, "then a cancelled execution leaves the due index"
    rig.driver.pump()
    assert rig.status("zz") == "CANCELLED" and rec.count("zz") == 1


def test_cancel_terminal_is_already_terminal(rig):
    rig.engine.start("order", {"order_id": "t"}, execution_id="done")
    rig.driver.pump()
    with pytest.raises(AlreadyTerminal) as err:
        rig.engine.cancel("done")
    assert err.value.details["status"] == "COMPLETED"
    with pytest.raises(ExecutionNotFound):
        rig.engine.cancel("missing")


def test_listing_pages_newest_first_and_filters(rig):
    for i in range(7):
        rig.engine.start("order" if i % 2 else "napper", {"order_id": str(i)}, execution_id=f"l{i}")
        rig.clock.advance(1)
    rig.engine.cancel("l3")
    seen, cursor = [], None
    for _ in range(5):
        page = rig.engine.list(limit=3, cursor=cursor)
        assert len(page.items) <= 3
        seen += [e.id for e in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [f"l{i}" for i in reversed(range(7))]
    assert [e.id for e in rig.engine.list(status="CANCELLED").items] == ["l3"]
    assert [e.id for e in rig.engine.list(workflow="order").items] == ["l5", "l3", "l1"]
    with pytest.raises(InvalidInput):
        rig.engine.list(status="BOGUS")
    with pytest.raises(InvalidInput):
        rig.engine.list(limit=0)
    with pytest.raises(InvalidInput):
        rig.engine.list(cursor="%%% not a cursor")


def test_sweep_is_bounded_per_call(aws, make_engine, clock, reg):
    rig = build_rig(aws, make_engine, clock, reg, config=EngineConfig(sweep_limit=3, sweep_page=2))
    for i in range(5):
        rig.engine.start("napper", {}, execution_id=f"s{i}")
    rig.driver.pump()
    rig.clock.advance(7200)
    first = rig.engine.sweep()
    assert first.truncated and first.woken == 3
    second = rig.engine.sweep()
    assert not second.truncated and second.woken == 2
    rig.driver.pump()
    assert all(rig.status(f"s{i}") == "COMPLETED" for i in range(5))
